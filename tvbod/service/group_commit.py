"""Durability at the end of each loop turn (mixed into `Server`): the group commit that fsyncs every
journal a batch of requests touched before any of its replies is sent, and the checkpoints of
plants whose journals grew long (docs/reliability.md, *The write path*)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tvbod.service.store import StorageError

#: Threads that fsync the journals of one batch concurrently (ext4 folds them into one commit).
_SYNC_THREADS = 16
#: Periodic checkpoints are written one at a time, the most overdue first, at least this far
#: apart (a plant's journal just grows meanwhile). Plants that step at one rate from one start
#: fall due together: 30 temperature plants at 10 Hz reached `checkpoint_every` within 100 ms
#: every 2.5 s, and writing them back to back (~4 ms each, on the loop) held every reply for
#: ~100 ms (docs/benchmarks.md, *Daemon under open-loop load*).
_CHECKPOINT_GAP_S = 0.02


class GroupCommit:
    """`_sync_journals` and `_checkpoint_due_plants` over the server's plants, sink and metrics."""

    _last_checkpoint = -1e9  # time.monotonic() at the end of the last periodic checkpoint

    def _pool(self) -> ThreadPoolExecutor:
        if self._sync_pool is None:
            self._sync_pool = ThreadPoolExecutor(_SYNC_THREADS, "tvbod-io")
        return self._sync_pool

    def _checkpoint_due_plants(self, plants=None) -> None:
        """Checkpoint the most overdue plant (of `plants`; default all) whose journal is long
        enough and whose model job is not running.

        Runs after the batch's replies went out, and for plants whose job was just collected
        (`Server._collect`, before their held requests are answered). One plant per call; when
        several are due, `_CHECKPOINT_GAP_S` after the last one: a burst of due plants is spread
        over the following turns, a lone due plant is written at once.
        """
        plants = self.plants.values() if plants is None else plants
        due = [p for p in plants if p.checkpoint_due and not self._workers.busy(p.name)]
        if not due or (len(due) > 1
                       and time.monotonic() - self._last_checkpoint < _CHECKPOINT_GAP_S):
            return
        plant = max(due, key=lambda p: p.records_since_checkpoint)
        try:
            path, error = plant.write_checkpoint(plant.state()), None
        except StorageError as exc:
            path, error = None, exc
        plant.checkpoint_done(path, error, "periodic")
        self._last_checkpoint = time.monotonic()

    def _sync_journals(self) -> bool:
        """Group commit: fsync every journal this batch wrote, concurrently. False on failure."""
        dirty = [p.store.journal for p in self.plants.values() if p.store.journal.unsynced]
        start = time.perf_counter()
        try:
            if len(dirty) == 1:
                dirty[0].sync()
            elif dirty:
                list(self._pool().map(lambda j: j.sync(), dirty))
        except StorageError as exc:
            # After a failed fsync the page cache cannot be trusted (the PostgreSQL lesson):
            # stop without replying; a restart recovers from what is really on disk.
            self.sink.emit("storage_error", level="critical", what="journal fsync", error=str(exc),
                           action="stopping; restart recovers from the journal on disk")
            self.exit_code = 1
            self.stop_requested = True
            return False
        if dirty:
            self.metrics.fsync(time.perf_counter() - start)
        return True
