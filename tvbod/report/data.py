"""What a plant's report shows, read from its state directory only (nothing is written there).

`collect(plant_dir, plant_config)` gathers the recorded steps (the `measurement` events, the rows
`tvbod export` writes, with the trigger's window test and the safety fields), the events an
operator acts on, the regime changes the adapter's metadata shows, whether the daemon could
restore the plant (or would quarantine it), and the gains to deploy now: the recommendation rule
of `tvbod best` (tvbod/core/recommend.py) applied to the optimizer a restore would serve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Events listed in the report's table besides every warning, error and critical one.
LISTED = ("reset", "config_reloaded", "plant_restored", "plant_repaired", "plant_removed",
          "adapter_claimed")
#: Fields every event has, left out of the table's details.
_COMMON = ("timestamp", "level", "event", "plant", "t")
#: A metadata key marks regimes when its value changes at least once and at most this often.
MAX_REGIME_CHANGES = 10


@dataclass(frozen=True)
class Step:
    """One recorded step: the export's columns plus the trigger's window test and safety."""

    t: int
    proposal_id: str
    gains: dict[str, float | int]
    measurement: float | None
    failed: bool
    psi: float | None
    threshold: float | None
    reset: bool
    dataset_size: int
    wall_time: str | None
    test: str | None = None
    window_psi: float | None = None
    window_threshold: float | None = None
    safe_fraction: float | None = None
    safety_violation: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Best:
    """The gains to deploy now, with the posterior's prediction there (measurement units)."""

    gains: dict[str, float | int]
    mean: float
    std: float
    t: int
    measured_at: int
    dataset_size: int
    certified: bool | None


@dataclass(frozen=True)
class Regime:
    """Metadata `key` changed from `before` to `after` at step `t`."""

    t: int
    key: str
    before: Any
    after: Any


@dataclass(frozen=True)
class PlantReport:
    """Everything the page shows for one plant."""

    plant: str
    directory: str
    steps: list[Step]
    events: list[dict[str, Any]]
    regimes: list[Regime]
    best: Best | None
    units: dict[str, str]
    description: str
    sense: str
    configuration: str
    configuration_source: str
    restore_errors: list[str]
    notes: list[str]


def number(value: Any) -> float | None:
    """A finite float, or None (events spell NaN and infinities as strings)."""
    if value is None or isinstance(value, (str, bool)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step(e: dict[str, Any]) -> Step:
    return Step(t=e["t"], proposal_id=e["proposal_id"], gains=e["gains"],
                measurement=number(e.get("measurement")), failed=bool(e.get("failed")),
                psi=number(e.get("psi")), threshold=number(e.get("threshold")),
                reset=bool(e.get("reset")), dataset_size=e["dataset_size"],
                wall_time=e.get("timestamp"), test=e.get("test"),
                window_psi=number(e.get("window_psi")),
                window_threshold=number(e.get("window_threshold")),
                safe_fraction=number(e.get("safe_fraction")),
                safety_violation=bool(e.get("safety_violation")),
                metadata=e.get("metadata") or {})


def regimes(steps: list[Step]) -> list[Regime]:
    """Changes of the adapter's piecewise-constant metadata (a friction that jumps, a regime
    index): keys whose value changes between 1 and MAX_REGIME_CHANGES times."""
    keys = sorted({k for s in steps for k, v in s.metadata.items()
                   if isinstance(v, (int, float, str)) and not isinstance(v, bool)})
    out: list[Regime] = []
    for key in keys:
        changes, last = [], None
        for s in steps:
            value = s.metadata.get(key)
            if value is not None and last is not None and value != last:
                changes.append(Regime(s.t, key, last, value))
            last = value if value is not None else last
        if 1 <= len(changes) <= MAX_REGIME_CHANGES:
            out += changes
    return sorted(out, key=lambda r: (r.t, r.key))


def listed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events an operator acts on, in order: resets, reloads, restores, repairs, claims and
    every warning or error (replayed copies left out)."""
    return [e for e in events if not e.get("replayed") and (
        e.get("event") in LISTED or e.get("level") in ("warning", "error", "critical"))]


def details(e: dict[str, Any]) -> str:
    """An event's fields in one line; a reset says which test fired with its statistic."""
    if e.get("event") == "reset" and e.get("reason") == "event":
        if e.get("test") == "window":
            why = (f"window test: |sum e| {number(e.get('window_psi')) or 0:.4g} > "
                   f"{number(e.get('window_threshold')) or 0:.4g} (w = {e.get('window')})")
        else:
            why = (f"point test: psi {number(e.get('psi')) or 0:.4g} > threshold "
                   f"{number(e.get('threshold')) or 0:.4g}")
        return (f"{why}; |D| {e.get('dataset_size_before')} -> {e.get('dataset_size_after')}, "
                f"t' = {e.get('t_prime')}")
    fields = [f"{k}={v}" for k, v in e.items() if k not in _COMMON]
    text = ", ".join(fields)
    return text if len(text) <= 400 else text[:397] + "..."


def best_now(plant_dir: Path, names: list[str]) -> tuple[Best | None, list[str]]:
    """The recommendation for the next step of the optimizer a restore would serve, with the
    problems that kept it from being rebuilt."""
    from tvbod.core.recommend import recommend
    from tvbod.service.state_check import recovered_copy, restored_strategy

    rec = recovered_copy(plant_dir)
    strategy, problems = restored_strategy(rec.state, rec.records_after_checkpoint, plant_dir)
    r = recommend(strategy) if strategy is not None else None
    if r is None:
        return None, problems
    if len(names) == 1 and len(r.x) == 1 and float(r.x[0]).is_integer() and _arms(strategy):
        gains = {names[0]: int(r.x[0])}
    else:
        gains = {n: float(v) for n, v in zip(names, r.x)}
    return Best(gains, r.mean, r.std, r.t, r.measured_at, r.dataset_size, r.certified), problems


def _arms(strategy) -> bool:
    from tvbod.core.domains import ArmsDomain

    return isinstance(strategy.domain, ArmsDomain)


def _configuration(plant_dir: Path, pc) -> tuple[str, str]:
    """The plant file's text when it is known, else the optimizer mapping the state records."""
    if pc is not None:
        try:
            return pc.path.read_text(encoding="utf-8"), str(pc.path)
        except OSError:
            pass
    import yaml

    from tvbod.commands.replay import recorded_optimizer

    try:
        mapping = recorded_optimizer(plant_dir, None)
    except SystemExit as exc:
        return str(exc), "no configuration recorded"
    return (yaml.safe_dump({"optimizer": mapping}, sort_keys=False),
            "the optimizer settings recorded in the state (pass --config for the plant file)")


def _history(plant_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The recorded measurements; a history with a step missing is shown with a warning."""
    from tvbod.commands.replay import HistoryGap, checked_history, load_history

    try:
        return checked_history(plant_dir)[0], []
    except HistoryGap as exc:
        return load_history(plant_dir), [f"the recorded history is incomplete: {exc}"]


def collect(plant_dir: Path, pc=None, last: int | None = None) -> PlantReport:
    """The report of the plant in `plant_dir`; `pc` (its PlantConfig, optional) adds units, the
    description and the plant file; `last` keeps only the newest `last` steps."""
    from tvbod.service.event_files import read_history
    from tvbod.service.state_check import restore_problems

    history, notes = _history(plant_dir)
    steps = [_step(e) for e in history]
    if last is not None and len(steps) > last:
        notes.append(f"steps {steps[-last].t}..{steps[-1].t} of {len(steps)} shown (--last)")
        steps = steps[-last:]
    first = steps[0].t if steps else 0
    events = [e for e in listed_events(read_history(plant_dir)) if e.get("t", first) >= first]
    names = [p.name for p in pc.parameters] if pc is not None else (
        list(steps[-1].gains) if steps else [])
    best, problems = best_now(plant_dir, names)
    errors, _ = restore_problems(plant_dir)
    text, source = _configuration(plant_dir, pc)
    units = {p.name: p.unit for p in pc.parameters if p.unit} if pc is not None else {}
    return PlantReport(
        plant=plant_dir.name, directory=str(plant_dir), steps=steps, events=events,
        regimes=regimes(steps), best=best, units=units,
        description=pc.description if pc is not None else "",
        sense=pc.sense if pc is not None else _sense(plant_dir), configuration=text,
        configuration_source=source, restore_errors=errors,
        notes=notes + [p for p in problems if p not in errors])


def _sense(plant_dir: Path) -> str:
    from tvbod.commands.replay import recorded_optimizer

    try:
        return recorded_optimizer(plant_dir, None).get("sense", "maximize")
    except SystemExit:
        return "maximize"
