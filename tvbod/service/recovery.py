"""Restoring a plant on start: the newest checkpoint, then the journal after it replayed through
the same transition (`apply`, tvbod/service/transition.py) that live requests use.

`restore(plant)` refuses a history it cannot trust (a schema this code does not read, missing
journal records, a poisoned state, a configuration the stored data cannot be reinterpreted
under) with a `RestoreError`, which quarantines the plant (tvbod/service/server.py); it re-emits
the event lines a crash left out, and reports what it did as the `plant_restored` event.
"""

from __future__ import annotations

import time
from typing import Any

from tvbod.errors import TvbodError
from tvbod.service.checkpoints import STATE_SCHEMA, load_checkpoint
from tvbod.service.config import inherit
from tvbod.service.reload import changed_keys, frozen_changes
from tvbod.service.state_check import (
    describe_source, poisoned_records, poisoned_state, stored_optimizer,
)
from tvbod.service.store import StorageError, UnsupportedSchema
from tvbod.service.transition import apply, replay_divergence

#: What an operator can do about a plant that cannot be restored (docs/reliability.md, Quarantine).
_REMEDY = ("Its files are kept as they are; `tvbod inspect {directory}` says what is wrong and "
           "`tvbod repair` rebuilds the plant from its history up to the last valid record")


class RestoreError(TvbodError):
    """The saved state cannot be used with the plant's configuration (the daemon refuses to start)."""


def restore(plant) -> dict[str, Any]:
    """Load `plant`'s (a `PlantRuntime`) checkpoint, replay the journal after it, and report
    what was done."""
    rec = _trusted_history(plant)
    state, config_changed = plant.state, False
    if rec.state is not None:
        config_changed = rec.state.get("fingerprint") != state.config.fingerprint
        _load(plant, rec.state)
        if config_changed:
            # Replay reads this to switch configuration at the right step.
            plant.events.emit("config_reloaded", t=state.strategy.t, at="start",
                              changed=changed_keys(stored_optimizer(rec.state),
                                                   state.config.optimizer_mapping),
                              fingerprint=plant.record_optimizer(),
                              pending=(state.proposal or {}).get("id"))
    replayed, relogged, divergences = _replay(plant, rec.records_after_checkpoint)
    state.strategy.compact()  # until the plant's next request reads the model
    # Replayed records count toward the next checkpoint: a daemon that crashes more often
    # than every `checkpoint_every` records still compacts, so replay per start stays bounded.
    plant.checkpointer.records_since = replayed
    if state.proposal is not None:
        plant.proposal_deadline = time.monotonic() + state.config.proposal_timeout
    info = {
        "source": rec.source, "journal_seq": rec.journal_seq, "replayed": replayed,
        "relogged": relogged,
        "problems": list(rec.problems) + divergences, "config_changed": config_changed,
        "t": state.strategy.t, "dataset_size": state.strategy.dataset_size,
        "pending": None if state.proposal is None else state.proposal["id"],
    }
    level = "warning" if info["problems"] else "info"
    info["fingerprint"] = plant.record_optimizer()  # replay reads the configuration by it
    plant.events.emit("plant_restored", level=level, **info)
    if plant.checkpointer.due:
        try:
            plant.checkpoint("recovery")
        except StorageError:
            pass  # reported as storage_error; the next periodic checkpoint tries again
    return info


def _trusted_history(plant):
    """The store's recovered history (`PlantStore.recover`), or a `RestoreError` when it is
    written in an unknown schema, has a gap or is poisoned."""
    name, store = plant.state.name, plant.store
    try:
        rec = store.recover()
    except UnsupportedSchema as exc:
        raise RestoreError(
            f"plant {name!r}: {exc}. The state in {store.directory} was written by another "
            "tvbod version; run that version, or migrate (docs/deployment.md, Upgrades)") from exc
    if rec.missing:
        first, last = rec.missing[0]
        raise RestoreError(
            f"plant {name!r}: journal records {first}..{last} are missing after the "
            f"{describe_source(rec.source)} ({'; '.join(rec.problems)}); refusing to continue "
            f"with a partial history. {_REMEDY.format(directory=store.directory)}")
    poison = poisoned_state(rec.state) + poisoned_records(rec.records_after_checkpoint)
    if poison:
        raise RestoreError(
            f"plant {name!r}: the saved state is poisoned ({'; '.join(poison)}). "
            f"{_REMEDY.format(directory=store.directory)}")
    return rec


def _load(plant, saved: dict) -> None:
    """The checkpoint `saved` into the plant's state, under the stored configuration's frozen
    keys (`inherit`); any malformed state is one `RestoreError`."""
    state, directory = plant.state, plant.store.directory
    try:
        if saved.get("schema") != STATE_SCHEMA:
            raise RestoreError(f"checkpoint schema {saved.get('schema')!r}, expected {STATE_SCHEMA}")
        stored = stored_optimizer(saved)
        state.config = inherit(state.config, stored)
        frozen = frozen_changes(stored, state.config.optimizer_mapping)
        if frozen:
            raise RestoreError(
                f"plant {state.name!r}: the configuration changed "
                f"{', '.join('optimizer.' + k for k in frozen)} since the state in "
                f"{directory} was written; the stored data cannot be reinterpreted. "
                "Restore the old configuration, or rebuild the plant under the new one with "
                "`tvbod repair`")
        load_checkpoint(state, saved)
    except RestoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed state is one kind of problem
        raise RestoreError(
            f"plant {state.name!r}: the saved state in {directory} does not fit the "
            f"plant's configuration ({exc}); restore the old configuration, or rebuild "
            f"the plant with `tvbod repair`"
        ) from exc


def _replay(plant, records: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """Apply journaled records; `(applied, measurement lines re-logged, divergences)`."""
    replayed, relogged, divergences = 0, 0, []
    logged = _logged_measurements(plant, records)
    state = plant.state
    for record in records:
        try:
            problem = replay_divergence(state, record) if record["kind"] == "proposal" else None
            applied = apply(state, record)
        except Exception as exc:  # noqa: BLE001 - a record this code cannot apply
            raise RestoreError(
                f"plant {state.name!r}: the journal record of step {record.get('t')} "
                f"({record.get('kind')}) cannot be applied ({exc}). "
                f"{_REMEDY.format(directory=plant.store.directory)}") from exc
        if problem or applied.problem:
            divergences.append(problem or applied.problem)
        if applied.result is not None and record["id"] not in logged:
            # The crash came between the journal write and the event line: log it now.
            plant.tell_events.emit(applied, state.strategy, state.config, replayed=True)
            relogged += 1
        replayed += 1
    return replayed, relogged, divergences


def _logged_measurements(plant, records: list[dict[str, Any]]) -> set[str]:
    """Proposal ids of journaled tells whose `measurement` line is already in events.jsonl."""
    from tvbod.service.event_files import logged_measurements

    steps = [r["t"] for r in records if r["kind"] in ("tell", "observe")]
    return logged_measurements(plant.events.path, min(steps)) if steps else set()
