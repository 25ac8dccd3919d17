"""Durability at the end of each loop turn: the group commit that fsyncs every journal a batch of
requests touched before any of its replies is sent, and the checkpoints of plants whose journals
grew long (docs/reliability.md, *The write path*)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tvbod.service.checkpoints import checkpoint_dict
from tvbod.service.hosted import PlantHost
from tvbod.service.store import StorageError

#: Threads that fsync the journals of one batch concurrently (ext4 folds them into one commit).
_SYNC_THREADS = 16
#: Periodic checkpoints are written one at a time, the most overdue first, at least this far
#: apart (a plant's journal just grows meanwhile). Plants that step at one rate from one start
#: fall due together, and writing them back to back on the loop would hold every reply for the
#: whole burst (docs/benchmarks.md, *The daemon*).
_CHECKPOINT_GAP_S = 0.02


class GroupCommit:
    """`sync_journals` and `checkpoint_due_plants` over a `PlantHost`'s plants."""

    def __init__(self, host: PlantHost) -> None:
        self.host = host
        self._pool: ThreadPoolExecutor | None = None
        self._last_checkpoint = -1e9  # time.monotonic() at the end of the last periodic one

    def checkpoint_due_plants(self, plants=None) -> None:
        """Checkpoint the most overdue plant (of `plants`; default all) whose journal is long
        enough and whose job is not running.

        Runs after the batch's replies went out, and for plants whose job was just collected
        (before their parked requests are answered). One plant per call; when several are due,
        `_CHECKPOINT_GAP_S` after the last one: a burst of due plants is spread over the
        following turns, a lone due plant is written at once.
        """
        busy = self.host.workers.busy
        plants = self.host.plants.values() if plants is None else plants
        due = [p for p in plants if p.checkpointer.due and not busy(p.name)]
        if not due or (len(due) > 1
                       and time.monotonic() - self._last_checkpoint < _CHECKPOINT_GAP_S):
            return
        plant = max(due, key=lambda p: p.checkpointer.records_since)
        try:
            path, error = plant.checkpointer.write(checkpoint_dict(plant.state)), None
        except StorageError as exc:
            path, error = None, exc
        plant.checkpointer.done(path, error, "periodic", plant.strategy.t)
        self._last_checkpoint = time.monotonic()

    def sync_journals(self) -> bool:
        """Group commit: fsync every journal this batch wrote, concurrently. False on failure:
        after a failed fsync the page cache cannot be trusted (the PostgreSQL lesson), so the
        daemon stops without replying; a restart recovers from what is really on disk."""
        dirty = [p.store.journal for p in self.host.plants.values() if p.store.journal.unsynced]
        start = time.perf_counter()
        try:
            if len(dirty) == 1:
                dirty[0].sync()
            elif dirty:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(_SYNC_THREADS, "tvbod-io")
                list(self._pool.map(lambda j: j.sync(), dirty))
        except StorageError as exc:
            self.host.sink.emit("storage_error", level="critical", what="journal fsync",
                                error=str(exc),
                                action="stopping; restart recovers from the journal on disk")
            return False
        if dirty:
            self.host.metrics.fsync(time.perf_counter() - start)
        return True

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
