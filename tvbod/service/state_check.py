"""Whether a plant's saved state can be served: the checks restore, `tvbod inspect`, `tvbod
replay` and `tvbod repair` share.

A state is *poisoned* when a number the optimizer computes with is NaN or infinite (the
measurement map's offset/scale, the GP's data, its hyperparameters) or when a journaled
measurement is: every later posterior, trigger statistic and proposal would inherit it. The
daemon never stores one (the measurement guard, tvbod/service/measurement_checks.py), but older
releases could, and a state written elsewhere may hold one. A plant whose state is poisoned or
cannot be restored is quarantined by the daemon (tvbod/service/server.py), never served.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: Record kinds that carry a measurement.
MEASURED = ("tell", "observe")
#: How many offending entries one problem sentence names.
_NAMED = 3


def stored_optimizer(state: dict) -> dict:
    """The optimizer mapping a checkpoint was written under, with its behaviour version
    (`behaviours.read_stored`: a mapping stored before the key existed says it by its keys)."""
    from tvbod.core.behaviours import read_stored

    return read_stored(state.get("optimizer", {}))


def non_finite(value: Any, path: str, found: list[str]) -> list[str]:
    """Append to `found` the dotted path of every NaN or infinite float in `value` (nested
    dicts and lists, as a checkpoint holds them); returns `found`."""
    if isinstance(value, float):
        if not math.isfinite(value):
            found.append(f"{path} = {value!r}")
    elif isinstance(value, dict):
        for key, item in value.items():
            non_finite(item, f"{path}.{key}", found)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            non_finite(item, f"{path}[{i}]", found)
    return found


def _sentence(found: list[str], what: str) -> list[str]:
    if not found:
        return []
    more = f" and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
    return [f"{what}: {', '.join(found[:_NAMED])}{more}"]


def poisoned_state(state: dict[str, Any] | None) -> list[str]:
    """Problems of a checkpointed plant state: non-finite numbers in its optimizer state."""
    if not state:
        return []
    found = non_finite(state.get("strategy"), "strategy", [])
    return _sentence(found, "non-finite numbers in the checkpoint's optimizer state")


def poisoned_records(records: list[dict[str, Any]]) -> list[str]:
    """Problems of journal records: a measurement or point that is not finite."""
    found = []
    for record in records:
        if record.get("kind") in MEASURED:
            bad = non_finite([record.get("y"), record.get("x")], f"t={record.get('t')}", [])
            found += [b.replace("[0]", " measurement").replace("[1]", " gains") for b in bad]
    return _sentence(found, "non-finite journaled measurements")


def poisoned_history(history: list[dict[str, Any]]) -> list[str]:
    """Problems of a recorded history (`measurement` events): a measurement, point or trigger
    statistic that is not finite (events spell those as the strings "NaN", "Infinity")."""
    found = []
    for e in history:
        values = {key: e.get(key) for key in ("measurement", "x", "psi", "mu")}
        values = {k: float(v) if isinstance(v, str) else v for k, v in values.items()}
        found += [b.replace(".", " ", 1) for b in non_finite(values, f"t={e.get('t')}", [])]
    return _sentence(found, "non-finite values in the recorded history")


def recovered_copy(plant_dir: Path):
    """What `PlantStore.recover` finds in `plant_dir`, run on a temporary copy of its checkpoints
    and journals (nothing in `plant_dir` is modified). Raises `UnsupportedSchema` as recover does."""
    from tvbod.service.store import PlantStore

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "plants" / plant_dir.name
        shutil.copytree(plant_dir, copy, ignore=shutil.ignore_patterns("events*"))
        store = PlantStore(Path(tmp), plant_dir.name)
        try:
            return store.recover()
        finally:
            store.close()


def restore_problems(plant_dir: Path) -> tuple[list[str], list[str]]:
    """`(errors, notes)` of restoring `plant_dir` as the daemon would, on a temporary copy (nothing
    is modified). `errors` make the plant unrestorable (the daemon quarantines it): journal records
    missing after the checkpoint, a poisoned state, a state the recorded optimizer cannot load.
    `notes` are what recovery mended on the copy (a torn journal tail, a checkpoint it would set
    aside) and does not stop a start."""
    from tvbod.service.store import UnsupportedSchema

    try:
        rec = recovered_copy(plant_dir)
    except UnsupportedSchema as exc:
        return [f"written by another tvbod version: {exc}"], []
    errors = [f"journal records {a}..{b} are missing after the {describe_source(rec.source)}"
              for a, b in rec.missing]
    errors += poisoned_state(rec.state) + poisoned_records(rec.records_after_checkpoint)
    if not errors:
        errors += _apply_problems(rec.state, rec.records_after_checkpoint, plant_dir)
    notes = [p for p in rec.problems if "are missing" not in p]
    return errors, notes


def describe_source(source: str) -> str:
    """The checkpoint a recovery started from, in words."""
    return {"current": "checkpoint", "previous": "previous checkpoint (checkpoint.prev)"}.get(
        source, "plant's first step (no checkpoint)")


def _apply_problems(state: dict[str, Any] | None, records: list[dict[str, Any]],
                    plant_dir: Path) -> list[str]:
    """Whether the optimizer the state was written under loads it and takes every journaled
    measurement after it (before the first checkpoint: the optimizer of the plant's last start)."""
    return restored_strategy(state, records, plant_dir)[1]


def restored_strategy(state: dict[str, Any] | None, records: list[dict[str, Any]],
                      plant_dir: Path):
    """`(strategy, problems)`: the optimizer a restore serves, rebuilt offline from checkpointed
    `state` and the journal `records` after it, as `transition.apply` replays them (each
    measurement told in turn). `strategy` is None when there is nothing to rebuild from (no
    checkpoint and no recorded start) or when `problems` names why it cannot be rebuilt."""
    from tvbod.core import make_strategy
    from tvbod.service.event_files import load_epochs

    epochs = load_epochs(plant_dir) if state is None else []
    if state is None and not epochs:
        return None, []
    try:
        mapping = stored_optimizer(state) if state is not None else epochs[-1][1]
        strategy = make_strategy(mapping)
        if state is not None:
            strategy.load_state_dict(state["strategy"])
    except Exception as exc:  # noqa: BLE001 - any failure to load is the answer
        return None, [f"the checkpoint's optimizer state does not load ({exc})"]
    for record in records:
        if record.get("kind") in MEASURED:
            try:
                strategy.tell(record["x"], record["y"], failed=bool(record.get("failed")))
            except Exception as exc:  # noqa: BLE001
                return None, [f"the journal record of step {record.get('t')} cannot be applied "
                              f"({exc})"]
    return strategy, []
