"""A plant's checkpoints: its `PlantState` as a checkpoint dict and back, and the writer that
compacts the journal into a checkpoint and rotates the event log (docs/reliability.md).

`Checkpointer.write` is the I/O half (thread-safe per plant: it touches only this plant's files),
`Checkpointer.done` the bookkeeping and events after it, on the loop's thread; the server's group
commit (tvbod/service/group_commit.py) runs the two apart, `PlantRuntime.checkpoint` together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvbod.service.events import PlantEventLog
from tvbod.service.reload import rebuild_strategy
from tvbod.service.store import PlantStore
from tvbod.service.transition import PlantState, pack_told, unpack_told

STATE_SCHEMA = 1


def checkpoint_dict(state: PlantState) -> dict[str, Any]:
    """Everything needed to continue exactly: strategy state plus the protocol bookkeeping."""
    return {
        "schema": STATE_SCHEMA,
        "plant": state.name,
        "fingerprint": state.config.fingerprint,
        "optimizer": state.config.optimizer_mapping,
        "strategy": state.strategy.state_dict(),
        "proposal": state.proposal,
        "issued_at_t": state.issued_at_t,
        "told": [[k, v] for k, v in state.told.items()],
        "abandoned": [[k, v] for k, v in state.abandoned.items()],
        "told_replies": [[pid, *unpack_told(entry)] for pid, entry in state.told_replies.items()],
        "cache": [[rid, dg, reply] for rid, (dg, reply) in state.cache.items()],
        "tells": state.tells,
        "failed_tells": state.failed_tells,
    }


def load_checkpoint(state: PlantState, saved: dict[str, Any]) -> None:
    """Set `state` to what the checkpoint dict `saved` holds, under `state.config` (one the
    stored optimizer mapping is compatible with). A point prepared (never issued) under other
    settings is recomputed under these. Raises on anything malformed."""
    same = saved.get("fingerprint") == state.config.fingerprint
    state.strategy = rebuild_strategy(saved["strategy"], state.config.optimizer,
                                      keep_pending=same or saved["proposal"] is not None)
    state.proposal = saved["proposal"]
    state.issued_at_t = int(saved["issued_at_t"])
    one = _Deduplicated()  # equal strings read back as one object, as live
    state.told_replies = {  # absent in checkpoints written before it existed
        one(pid): pack_told(dg, reply) for pid, dg, reply in saved.get("told_replies", [])}
    state.told = {one(k): int(v) for k, v in saved["told"]}
    state.abandoned = {one(k): int(v) for k, v in saved["abandoned"]}
    state.cache = {rid: (one(dg), one.keys(reply)) for rid, dg, reply in saved["cache"]}
    state.tells, state.failed_tells = int(saved["tells"]), int(saved["failed_tells"])


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


@dataclass
class CheckpointPolicy:
    """The daemon file's checkpoint and event-log settings for one plant (a reload changes them):
    a checkpoint every `every` journal records; rotate events.jsonl once it reaches
    `segment_bytes` (0: never) keeping `keep_segments` rotated segments (0: all)."""

    every: int = 50
    segment_bytes: int = 0
    keep_segments: int = 0


class Checkpointer:
    """Counts the journal records since the last checkpoint and writes checkpoints."""

    def __init__(self, store: PlantStore, events: PlantEventLog, policy: CheckpointPolicy) -> None:
        self.store, self.events, self.policy = store, events, policy
        self.records_since = 0
        self._rotation: tuple[str, list[str]] | str | None = None  # set by `write`

    @property
    def due(self) -> bool:
        return self.records_since >= self.policy.every

    def write(self, saved: dict[str, Any]) -> Path:
        """The I/O half of a checkpoint of the checkpoint dict `saved`.

        The event lines (the plant's full history, which replay reads) are written and fsync'd
        first: the journal records that the checkpoint absorbs can no longer re-emit them after a
        power cut. While the disk refuses a line, `events.sync` raises `StorageError` and the
        checkpoint is not written: the journal keeps the records, and a restart's replay
        re-emits the lines the event file lacks.
        """
        self.events.sync()
        path = self.store.compact(saved)
        self._rotation = None
        try:
            if self.policy.segment_bytes and \
                    os.path.getsize(self.events.path) >= self.policy.segment_bytes:
                removed = self.events.rotate(path, self.policy.keep_segments)
                self._rotation = (self.events.path.name, removed)
        except OSError as exc:
            self._rotation = str(exc)
        return path

    def done(self, path: Path | None, error: Exception | None, reason: str, t: int) -> None:
        """Bookkeeping and events after `write` (on the loop's thread); `t`: the plant's step."""
        if error is not None:
            self.events.emit("storage_error", level="error", what="checkpoint", error=str(error))
            return
        self.records_since = 0
        self.events.emit("checkpoint_written", t=t, path=str(path), reason=reason,
                         journal_seq=self.store.journal.last_seq)
        rotation, self._rotation = self._rotation, None
        if isinstance(rotation, str):
            self.events.emit("storage_error", level="error", what="event log rotation",
                             error=rotation)
        elif rotation is not None:
            from tvbod.service.event_files import rotated_segments

            self.events.emit("events_rotated", t=t,
                             segment=rotated_segments(self.store.directory)[-1][1].name,
                             removed=rotation[1])
