"""Durability at the end of each loop turn (mixed into `Server`): the group commit that fsyncs every
journal a batch of requests touched before any of its replies is sent, and the checkpoints of
plants whose journals grew long (docs/reliability.md, *The write path*)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tvbod.service.store import StorageError

#: Threads that fsync the journals of one batch concurrently (ext4 folds them into one commit).
_SYNC_THREADS = 16


class GroupCommit:
    """`_sync_journals` and `_checkpoint_due_plants` over the server's plants, sink and metrics."""

    def _pool(self) -> ThreadPoolExecutor:
        if self._sync_pool is None:
            self._sync_pool = ThreadPoolExecutor(_SYNC_THREADS, "tvbod-io")
        return self._sync_pool

    def _checkpoint_due_plants(self, plants=None) -> None:
        """Checkpoint every plant (of `plants`; default all) whose journal is long enough and
        whose model job is not running, the file I/O concurrently.

        Runs after the batch's replies went out, and for plants whose job was just collected
        (`Server._collect`, before their held requests are answered); state snapshots are taken
        on this thread, and each worker touches only its own plant's files.
        """
        plants = self.plants.values() if plants is None else plants
        due = [(p, p.state()) for p in plants if p.checkpoint_due and not self._workers.busy(p.name)]
        if not due:
            return

        def write(item):
            plant, state = item
            try:
                return plant, plant.write_checkpoint(state), None
            except StorageError as exc:
                return plant, None, exc

        results = [write(due[0])] if len(due) == 1 else list(self._pool().map(write, due))
        for plant, path, error in results:
            plant.checkpoint_done(path, error, "periodic")

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
