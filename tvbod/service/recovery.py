"""A plant's persistence: restore on start, checkpoints, and switching to new settings.

`PlantRecovery` is the half of `PlantRuntime` (tvbod/service/plant.py) that touches the plant's
files: `restore` loads the newest checkpoint and replays the journal after it through the same
transition (`_apply`) that live requests use; `checkpoint` (or `write_checkpoint` +
`checkpoint_done`, the periodic split across threads) compacts the journal into a checkpoint;
`prepare_reconfigure` / `reconfigure` carry the plant's exact state into a new configuration
(SIGHUP). The request half (ask, tell, observe, ...) is in plant.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tvbod.core import Strategy
from tvbod.errors import TvbodError
from tvbod.service.config import PlantConfig, inherit
from tvbod.service.reload import changed_keys, frozen_changes, rebuild_strategy
from tvbod.service.state_check import (
    describe_source, poisoned_records, poisoned_state, stored_optimizer,
)
from tvbod.service.store import StorageError, UnsupportedSchema
from tvbod.service.transition import pack_told, unpack_told

STATE_SCHEMA = 1
#: What an operator can do about a plant that cannot be restored (docs/reliability.md, Quarantine).
_REMEDY = ("Its files are kept as they are; `tvbod inspect {directory}` says what is wrong and "
           "`tvbod repair` rebuilds the plant from its history up to the last valid record")


class RestoreError(TvbodError):
    """The saved state cannot be used with the plant's configuration (the daemon refuses to start)."""


class _Deduplicated:
    """Maps each string to the first equal string it was given: the strings a checkpoint holds
    many times (proposal ids in `told` and `told_replies`, digests and reply keys in `cache`) are
    then one object each in memory, as in a plant that made them live. Values are not changed."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        return self._seen.setdefault(text, text) if isinstance(text, str) else text

    def keys(self, reply: Any) -> Any:
        """`reply` (a dict) with its keys deduplicated, same order."""
        if not isinstance(reply, dict):
            return reply
        return {self(k): v for k, v in reply.items()}


class PlantRecovery:
    """Restore, checkpoint and reconfigure; mixed into `PlantRuntime`, whose attributes it uses."""

    def restore(self) -> dict[str, Any]:
        """Load the checkpoint, replay the journal after it, and report what was done."""
        try:
            rec = self.store.recover()
        except UnsupportedSchema as exc:
            raise RestoreError(
                f"plant {self.name!r}: {exc}. The state in {self.store.directory} was written by "
                "another tvbod version; run that version, or migrate (docs/deployment.md, "
                "Upgrades)") from exc
        if rec.missing:
            first, last = rec.missing[0]
            raise RestoreError(
                f"plant {self.name!r}: journal records {first}..{last} are missing after the "
                f"{describe_source(rec.source)} ({'; '.join(rec.problems)}); refusing to continue "
                f"with a partial history. {_REMEDY.format(directory=self.store.directory)}")
        poison = poisoned_state(rec.state) + poisoned_records(rec.records_after_checkpoint)
        if poison:
            raise RestoreError(
                f"plant {self.name!r}: the saved state is poisoned ({'; '.join(poison)}). "
                f"{_REMEDY.format(directory=self.store.directory)}")
        config_changed = False
        if rec.state is not None:
            config_changed = rec.state.get("fingerprint") != self.config.fingerprint
            self._load_state(rec.state)
            if config_changed:
                # Replay reads this to switch configuration at the right step.
                self.events.emit("config_reloaded", t=self.strategy.t, at="start",
                                 changed=changed_keys(stored_optimizer(rec.state),
                                                      self.config.optimizer_mapping),
                                 fingerprint=self.record_optimizer(),
                                 pending=(self.proposal or {}).get("id"))
        replayed, relogged, divergences = self._replay(rec.records_after_checkpoint)
        self.strategy.compact()  # until the plant's next request reads the model
        # Replayed records count toward the next checkpoint: a daemon that crashes more often
        # than every `checkpoint_every` records still compacts, so replay per start stays bounded.
        self.records_since_checkpoint = replayed
        if self.proposal is not None:
            self.proposal_deadline = time.monotonic() + self.config.proposal_timeout
        info = {
            "source": rec.source, "journal_seq": rec.journal_seq, "replayed": replayed,
            "relogged": relogged,
            "problems": list(rec.problems) + divergences, "config_changed": config_changed,
            "t": self.strategy.t, "dataset_size": self.strategy.dataset_size,
            "pending": None if self.proposal is None else self.proposal["id"],
        }
        level = "warning" if info["problems"] else "info"
        info["fingerprint"] = self.record_optimizer()  # replay reads the configuration by it
        self.events.emit("plant_restored", level=level, **info)
        if self.checkpoint_due:
            try:
                self.checkpoint("recovery")
            except StorageError:
                pass  # reported as storage_error; the next periodic checkpoint tries again
        return info

    def _replay(self, records: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
        """Apply journaled records; `(applied, measurement lines re-logged, divergences)`."""
        replayed, relogged, divergences = 0, 0, []
        logged = self._logged_measurements(records)
        for record in records:
            try:
                applied = self._apply(record)
            except Exception as exc:  # noqa: BLE001 - a record this code cannot apply
                raise RestoreError(
                    f"plant {self.name!r}: the journal record of step {record.get('t')} "
                    f"({record.get('kind')}) cannot be applied ({exc}). "
                    f"{_REMEDY.format(directory=self.store.directory)}") from exc
            if applied.problem:
                divergences.append(applied.problem)
            if applied.result is not None and record["id"] not in logged:
                # The crash came between the journal write and the event line: log it now.
                self._emit_tell_events(applied, replayed=True)
                relogged += 1
            replayed += 1
        return replayed, relogged, divergences

    def _logged_measurements(self, records: list[dict[str, Any]]) -> set[str]:
        """Proposal ids of journaled tells whose `measurement` line is already in events.jsonl."""
        from tvbod.service.event_files import logged_measurements

        steps = [r["t"] for r in records if r["kind"] in ("tell", "observe")]
        return logged_measurements(self.events.path, min(steps)) if steps else set()

    def _load_state(self, state: dict) -> None:
        try:
            if state.get("schema") != STATE_SCHEMA:
                raise RestoreError(f"checkpoint schema {state.get('schema')!r}, expected {STATE_SCHEMA}")
            stored = stored_optimizer(state)
            self.config = inherit(self.config, stored)
            frozen = frozen_changes(stored, self.config.optimizer_mapping)
            if frozen:
                raise RestoreError(
                    f"plant {self.name!r}: the configuration changed "
                    f"{', '.join('optimizer.' + k for k in frozen)} since the state in "
                    f"{self.store.directory} was written; the stored data cannot be reinterpreted. "
                    "Restore the old configuration, or rebuild the plant under the new one with "
                    "`tvbod repair`")
            # A point prepared (never issued) under other settings is recomputed under these.
            same = state.get("fingerprint") == self.config.fingerprint
            self.strategy = rebuild_strategy(state["strategy"], self.config.optimizer,
                                             keep_pending=same or state["proposal"] is not None)
            self.proposal = state["proposal"]
            self.issued_at_t = int(state["issued_at_t"])
            one = _Deduplicated()  # equal strings read back as one object, as live
            self.told_replies = {  # absent in checkpoints written before it existed
                one(pid): pack_told(dg, reply)
                for pid, dg, reply in state.get("told_replies", [])}
            self.told = {one(k): int(v) for k, v in state["told"]}
            self.abandoned = {one(k): int(v) for k, v in state["abandoned"]}
            self.cache = {rid: (one(dg), one.keys(reply)) for rid, dg, reply in state["cache"]}
            self.tells, self.failed_tells = int(state["tells"]), int(state["failed_tells"])
        except RestoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed state is one kind of problem
            raise RestoreError(
                f"plant {self.name!r}: the saved state in {self.store.directory} does not fit the "
                f"plant's configuration ({exc}); restore the old configuration, or rebuild "
                f"the plant with `tvbod repair`"
            ) from exc

    def record_optimizer(self) -> str:
        """Keep the optimizer mapping as `optimizers/<fingerprint>.json` in the plant's directory
        (events name it by fingerprint: a 50x50 kernel matrix does not belong in a log line)."""
        self.store.write_optimizer(self.config.fingerprint, self.config.optimizer_mapping)
        return self.config.fingerprint

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: strategy state plus the protocol bookkeeping."""
        return {
            "schema": STATE_SCHEMA,
            "plant": self.name,
            "fingerprint": self.config.fingerprint,
            "optimizer": self.config.optimizer_mapping,
            "strategy": self.strategy.state_dict(),
            "proposal": self.proposal,
            "issued_at_t": self.issued_at_t,
            "told": [[k, v] for k, v in self.told.items()],
            "abandoned": [[k, v] for k, v in self.abandoned.items()],
            "told_replies": [[pid, *unpack_told(entry)]
                             for pid, entry in self.told_replies.items()],
            "cache": [[rid, dg, reply] for rid, (dg, reply) in self.cache.items()],
            "tells": self.tells,
            "failed_tells": self.failed_tells,
        }

    @property
    def checkpoint_due(self) -> bool:
        return self.records_since_checkpoint >= self.checkpoint_every

    def write_checkpoint(self, state: dict[str, Any]) -> Path:
        """The I/O half of a checkpoint (thread-safe per plant: touches only this plant's files).

        The event lines (the plant's full history, which replay reads) are written and fsync'd
        first: the journal records that the checkpoint absorbs can no longer re-emit them after a
        power cut. While the disk refuses a line, `events.sync` raises `StorageError` and the
        checkpoint is not written: the journal keeps the records, and a restart's `_replay`
        re-emits the lines the event file lacks.
        """
        self.events.sync()
        path = self.store.compact(state)
        self._rotation = None
        try:
            if self.events_segment_bytes and \
                    os.path.getsize(self.events.path) >= self.events_segment_bytes:
                removed = self.events.rotate(path, self.events_keep_segments)
                self._rotation = (self.events.path.name, removed)
        except OSError as exc:
            self._rotation = str(exc)
        return path

    def checkpoint_done(self, path: Path | None, error: Exception | None, reason: str) -> None:
        """Bookkeeping and events after `write_checkpoint` (on the loop's thread)."""
        if error is not None:
            self.events.emit("storage_error", level="error", what="checkpoint", error=str(error))
            return
        self.records_since_checkpoint = 0
        self.events.emit("checkpoint_written", t=self.strategy.t, path=str(path), reason=reason,
                         journal_seq=self.store.journal.last_seq)
        rotation, self._rotation = self._rotation, None
        if isinstance(rotation, str):
            self.events.emit("storage_error", level="error", what="event log rotation",
                             error=rotation)
        elif rotation is not None:
            from tvbod.service.event_files import rotated_segments

            self.events.emit("events_rotated", t=self.strategy.t,
                             segment=rotated_segments(self.store.directory)[-1][1].name,
                             removed=rotation[1])

    def checkpoint(self, reason: str) -> None:
        """Write a checkpoint of everything journaled so far and start a fresh journal."""
        self.synced()  # the checkpoint makes every applied record durable
        try:
            path = self.write_checkpoint(self.state())
        except StorageError as exc:
            self.checkpoint_done(None, exc, reason)
            raise
        self.checkpoint_done(path, None, reason)

    def prepare_reconfigure(self, config: PlantConfig) -> Strategy:
        """A strategy for the new configuration holding this plant's exact state (may raise);
        a prepared, unissued point is recomputed under the new settings."""
        return rebuild_strategy(self.strategy.state_dict(), config.optimizer,
                                keep_pending=self.proposal is not None)

    def reconfigure(self, config: PlantConfig, strategy: Strategy, changed: list[str]) -> None:
        """Switch to a new configuration (from `prepare_reconfigure`) and checkpoint at once, so
        the checkpoint, the journal after it and the event history agree on the configuration."""
        old = self.config.fingerprint
        self.config, self.strategy = config, strategy
        self.events.emit("config_reloaded", t=strategy.t, at="reload", changed=changed,
                         fingerprint=self.record_optimizer(), previous_fingerprint=old,
                         pending=(self.proposal or {}).get("id"))
        try:
            self.checkpoint("reload")
        except StorageError:
            pass  # reported as storage_error; the next periodic checkpoint tries again
