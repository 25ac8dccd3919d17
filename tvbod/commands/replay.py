"""`tvbod replay PLANT_DIR`: re-run a plant's optimizer offline from its recorded history.

- verify (default): feed the recorded measurements to a fresh optimizer with the recorded
  configuration and check that it proposes exactly the recorded gains and resets at exactly the
  recorded steps; report the first divergence. Exactness holds on the machine (CPU kind and
  numpy/SciPy/OpenBLAS build) that recorded the history; on another one, whose BLAS kernels round
  differently in the last bit, `--tolerance REL` accepts proposals and psi within REL (relative,
  at least absolute REL) while resets must still agree, and reports the largest deviation.
- what-if (`--set KEY=VALUE ...`): the same recorded (gains, measurement) pairs against another
  optimizer configuration (e.g. `--set delta_b=0.01`, `--set strategy=gp-ucb`), printing where
  resets would have happened. The other optimizer's own proposals cannot be evaluated offline.

The history is the plant's event files, rotated segments first (`measurement` events,
deduplicated by proposal id), refused (exit 1, naming the missing steps and the files) when a
step is missing (`checked_history`); the configuration is the `optimizer` mapping stored in its
checkpoint, or `--config PLANT_FILE`. When retention removed the oldest segments, verification
starts from the checkpoint kept where the oldest remaining segment begins (event_files.py).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from tvbod.errors import TvbodError
from tvbod.service.event_files import load_epochs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant_dir", type=Path, help="a plant's state directory (STATE/plants/NAME)")
    parser.add_argument("--config", type=Path, help="plant file whose optimizer to use instead of "
                        "the one recorded in the checkpoint")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="what-if: override an optimizer key (dotted, YAML value); repeatable")
    parser.add_argument("--unset", action="append", default=[], metavar="KEY",
                        help="what-if: drop an optimizer key (e.g. reset_period)")
    parser.add_argument("--plot", type=Path, help="write a PNG of measurements, resets and gains")
    parser.add_argument("--tolerance", type=float, default=0.0, metavar="REL",
                        help="verify: accept proposals and psi within REL (relative, at least "
                        "absolute REL) instead of bit for bit, for a history recorded on another "
                        "machine; resets must still agree (default 0: exact)")


def load_history(plant_dir: Path) -> list[dict[str, Any]]:
    """The plant's measurements in step order, one per proposal id."""
    from tvbod.service.event_files import read_history

    seen: dict[str, dict] = {}
    for e in read_history(plant_dir):
        if e.get("event") == "measurement" and e.get("proposal_id") not in seen:
            seen[e["proposal_id"]] = e
    return sorted(seen.values(), key=lambda e: e["t"])


class HistoryGap(TvbodError):
    """The recorded history lacks a step (or holds one twice): the message names it and the
    files. Readers refuse it rather than skip: a silent hole would pass for a shorter run."""


def checked_history(plant_dir: Path) -> tuple[list[dict[str, Any]], dict | None, str | None]:
    """`(history, start, problem)`: the measurements of the kept history in step order (from
    where it begins), the checkpointed state it begins from (None: the plant's first step) and a
    problem sentence when that state is unreadable (`event_files.base_state`). Raises
    `HistoryGap` unless the steps are consecutive up to the newest checkpoint's
    (`event_files.continuity_problem`): the one continuity check of `replay` and `export`."""
    from tvbod.service.event_files import (
        base_state, checkpointed_step, continuity_problem, history_files,
    )

    history = load_history(plant_dir)
    start, problem = base_state(plant_dir)
    if start is not None:
        first = start["strategy"]["t"]
    else:
        first = history[0]["t"] if problem and history else 1
    history = [e for e in history if e["t"] >= first]
    gap = continuity_problem([(e["t"], e["proposal_id"]) for e in history], first,
                             checkpointed_step(plant_dir), history_files(plant_dir))
    if gap:
        raise HistoryGap(gap)
    return history, start, problem


def recorded_optimizer(plant_dir: Path, config: Path | None) -> dict:
    """The optimizer mapping to replay with."""
    if config is not None:
        from tvbod.service.config import load_plant_config

        return copy.deepcopy(load_plant_config(config).optimizer_mapping)
    import shutil
    import tempfile

    from tvbod.service.store import PlantStore

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(plant_dir, Path(tmp) / "plants" / plant_dir.name,
                        ignore=shutil.ignore_patterns("events*"))
        store = PlantStore(Path(tmp), plant_dir.name)
        state = store.recover().state
        store.close()
    if (not state or "optimizer" not in state) and load_epochs(plant_dir):
        return load_epochs(plant_dir)[-1][1]  # a live plant before its first checkpoint
    if not state or "optimizer" not in state:
        epochs = load_epochs(plant_dir)  # before the first checkpoint: the file of the first start
        if epochs:
            return epochs[0][1]
        raise SystemExit(f"tvbod replay: {plant_dir} has no readable checkpoint with the optimizer "
                         "configuration; pass --config PLANT_FILE")
    from tvbod.core.behaviours import read_stored

    return read_stored(state["optimizer"])


def apply_overrides(mapping: dict, sets: list[str], unsets: list[str]) -> dict:
    import yaml

    out = copy.deepcopy(mapping)
    for item in unsets:
        node = out
        *parents, leaf = item.split(".")
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"tvbod replay: --set needs KEY=VALUE, got {item!r}")
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(raw)
    from tvbod.core.spec_sections import uses_event_trigger

    if not uses_event_trigger(out):  # e.g. --set strategy=gp-ucb: the trigger keys go with it
        for key in ("trigger", "forgetting_floor"):
            out.pop(key, None)
    return out


def _number(value: Any) -> float:
    """A recorded float: events spell non-finite values "Infinity", "-Infinity", "NaN"."""
    return float(value) if isinstance(value, str) else value


def _deviation(recorded, replayed) -> float:
    """The largest `|a - b| / max(1, |a|)` over the entries (0 when equal, NaN equals NaN here;
    inf when one side is NaN or infinite and the other not)."""
    import numpy as np

    a = np.atleast_1d(np.asarray([_number(v) for v in np.atleast_1d(recorded)], dtype=float))
    b = np.atleast_1d(np.asarray(replayed, dtype=float))
    if a.shape != b.shape:
        return float("inf")
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0
    with np.errstate(invalid="ignore"):
        dev = np.where(same, 0.0, np.abs(a - b) / np.maximum(1.0, np.abs(a)))
    return float(np.nan_to_num(dev, nan=np.inf).max())


def verify(mapping: dict, history: list[dict], epochs: list[tuple[int, dict, bool]] | None = None,
           start: dict | None = None, tolerance: float = 0.0) -> tuple[int, str | None, list[int], float]:
    """Replay `history`; returns (steps reproduced, first divergence or None, reset steps, the
    largest deviation of a proposal or psi, `_deviation`: 0 when bit for bit).

    Each step tells the recorded gains, so a deviation within `tolerance` does not grow into a
    different trajectory. With `epochs`, the configuration switches as the daemon's did (a live reload or a restart
    with a changed file): the strategy is rebuilt from its `state_dict` under the new mapping.
    With `start` (a checkpointed plant state), replay begins from it instead of a fresh strategy.
    """
    import numpy as np

    from tvbod.core import make_strategy
    from tvbod.core.behaviours import read_stored, spelled
    from tvbod.service.reload import rebuild_strategy

    # Each mapping with its behaviour's settings spelled out: one that only spells them
    # differently is the same configuration (the daemon's fingerprint agrees).
    epochs = [(t, m, issued, spelled(m)) for t, m, issued in epochs or []]
    if start is not None:
        mapping = read_stored(start["optimizer"])
    elif epochs:
        mapping = epochs[0][1]
    s = make_strategy(mapping)
    if start is not None:
        s.load_state_dict(start["strategy"])
    current = spelled(mapping)
    resets, worst = [], 0.0
    for i, e in enumerate(history):
        latest = [(m, issued, full) for t_from, m, issued, full in epochs if t_from <= e["t"]]
        if latest and latest[-1][2] != current:
            new, issued, current = latest[-1]
            if issued:
                s.ask()  # the daemon had issued step t's proposal under the old settings
            s = rebuild_strategy(s.state_dict(), new, keep_pending=issued)
        if e["t"] != s.t:
            return (i, f"history jumps from step {s.t - 1} to {e['t']} (missing records)",
                    resets, worst)
        x = np.asarray(e["x"])
        proposed = x if e.get("observed") else s.ask()  # an observation was never proposed
        dev = _deviation(x, proposed)
        if dev > tolerance:
            return i, (f"t={e['t']}: recorded gains {x.tolist()} but the optimizer proposes "
                       f"{proposed.tolist()}"), resets, max(worst, dev)
        try:
            r = s.tell(x, e["measurement"], failed=bool(e.get("failed")))
        except ValueError as exc:  # DomainError: a measurement this optimizer refuses
            return i, f"t={e['t']}: the optimizer refuses the recorded measurement ({exc})", \
                resets, worst
        dev = max(dev, _deviation(e["psi"], r.psi))
        worst = max(worst, dev)
        if r.reset != e["reset"] or dev > tolerance:
            return i, (f"t={e['t']}: recorded reset={e['reset']} psi={e['psi']!r}, replay "
                       f"reset={r.reset} psi={r.psi!r}"), resets, worst
        if r.reset:
            resets.append(r.t)
    return len(history), None, resets, worst


def what_if(mapping: dict, history: list[dict]) -> list[tuple[int, bool, float, float]]:
    """(t, reset, psi, threshold) per step for the recorded (x, y) under another optimizer."""
    import numpy as np

    from tvbod.core import make_strategy

    s = make_strategy(mapping)
    out = []
    for e in history:
        r = s.tell(np.asarray(e["x"]), e["measurement"], failed=bool(e.get("failed")))
        out.append((e["t"], r.reset, r.psi, r.threshold))
    return out


def plot(path: Path, history: list[dict], whatif_resets: list[int] | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t = np.array([e["t"] for e in history])
    y = np.array([e["measurement"] for e in history])
    X = np.array([e["x"] for e in history], dtype=float)
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    axes[0].plot(t, y, ".-", lw=0.8, label="measurement")
    for e in history:
        if e["reset"]:
            axes[0].axvline(e["t"], color="tab:red", lw=0.8)
    for r in whatif_resets or []:
        axes[0].axvline(r, color="tab:green", ls="--", lw=0.8)
    axes[0].set_ylabel("measurement")
    axes[0].set_title("recorded resets: red; what-if resets: green dashed")
    names = list(history[0]["gains"]) if history else []
    for j, name in enumerate(names):
        axes[1].plot(t, X[:, j], lw=0.8, label=name)
    axes[1].set_xlabel("step t")
    axes[1].set_ylabel("gains")
    axes[1].legend(fontsize=7, ncol=4)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _poison(plant_dir: Path, history: list[dict[str, Any]]) -> list[str]:
    """Why the plant's history or saved state must not be called verified: non-finite recorded
    values, or a state the daemon would quarantine (tvbod/service/state_check.py)."""
    from tvbod.service.state_check import poisoned_history, restore_problems

    return poisoned_history(history) + restore_problems(plant_dir)[0]


def run(args: argparse.Namespace) -> int:
    from tvbod.service.event_files import has_history

    plant_dir = args.plant_dir
    if not has_history(plant_dir):
        print(f"tvbod replay: {plant_dir}/events.jsonl not found", file=sys.stderr)
        return 2
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("tvbod replay: --plot needs matplotlib, which is not installed "
                  "(pip install 'tvbod[plots]')", file=sys.stderr)
            return 2
    try:
        history, start, problem = checked_history(plant_dir)
    except HistoryGap as exc:
        print(f"tvbod replay: {exc}; nothing verified", file=sys.stderr)
        return 1
    if problem:
        print(f"tvbod replay: cannot verify: {problem}", file=sys.stderr)
        return 2
    poison = _poison(plant_dir, history)
    if poison and not args.set and not args.unset:
        for line in poison:
            print(f"tvbod replay: {line}", file=sys.stderr)
        print("tvbod replay: the plant's state is poisoned or cannot be restored; nothing "
              "verified (`tvbod inspect`, `tvbod repair`: docs/reliability.md, Quarantine)",
              file=sys.stderr)
        return 1
    from tvbod.core import SpecError

    try:  # a stored mapping no behaviour version reproduces is refused (behaviours.read_stored)
        mapping = recorded_optimizer(plant_dir, args.config)
        epochs = [] if args.config is not None else load_epochs(plant_dir)
    except SpecError as exc:
        print(f"tvbod replay: the recorded optimizer mapping: {exc}", file=sys.stderr)
        return 2
    if not args.set and not args.unset:
        if start is not None:
            epochs = [ep for ep in epochs if ep[0] >= start["strategy"]["t"]]
        n, divergence, resets, worst = verify(mapping, history, epochs, start, args.tolerance)
        if divergence:
            print(f"DIVERGED after {n} of {len(history)} steps: {divergence}"
                  + (f" (deviation {worst:.3g} > tolerance {args.tolerance:g})" if worst else ""))
            return 1
        how = ("exactly" if worst == 0 else
               f"within tolerance {args.tolerance:g} (largest deviation {worst:.3g})")
        print(f"verified: {n} steps reproduced {how} (proposals, psi, resets); "
              f"resets at {resets or 'no step'}")
        if args.plot:
            plot(args.plot, history, None)
            print(f"plot: {args.plot}")
        return 0
    other = apply_overrides(mapping, args.set, args.unset)
    try:
        rows = what_if(other, history)
    except SpecError as exc:
        print(f"tvbod replay: what-if optimizer is invalid: {exc}", file=sys.stderr)
        return 2
    recorded = [e["t"] for e in history if e["reset"]]
    alt = [t for t, reset, _, _ in rows if reset]
    print(f"what-if over {len(rows)} recorded steps: {', '.join(args.set + ['-' + u for u in args.unset])}")
    print(f"  recorded resets at: {recorded or 'none'}")
    print(f"  what-if resets at:  {alt or 'none'}")
    print(f"  {'t':>6} {'recorded':>9} {'what-if':>8} {'psi':>10} {'threshold':>10}")
    for (t, reset, psi, thr), e in zip(rows, history):
        if reset or e["reset"]:
            print(f"  {t:>6} {str(e['reset']):>9} {str(reset):>8} {psi:>10.4f} {thr:>10.4f}")
    if args.plot:
        plot(args.plot, history, alt)
        print(f"plot: {args.plot}")
    return 0
