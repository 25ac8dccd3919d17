"""Model work off the reply path: each plant's next step prepared on a worker thread.

A tell is answered once its record is journaled and the trigger has decided. What only shapes
the next step (the MAP refit and exploration update a tell defers, `Strategy.settle`, the next
proposal and the recommendation `best` reads) runs here, on a small thread pool, while the loop
thread keeps answering every other plant; numpy and LAPACK release the GIL for the heavy parts.

At most one job runs per plant, and while it runs the loop does not touch that plant's strategy:
requests for the plant are parked (`Server`) and answered, in arrival order, when the job is
collected. The job computes exactly what the next `ask` would have computed on the loop thread,
from the same state, so no result depends on timing: replay stays bit-exact, and a SIGKILL
during a job loses nothing (the job's output is recomputed from the journal after a restart).
"""

from __future__ import annotations

import queue
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from tvbod.service.malloc import Trimmer

__all__ = ["Prepared", "ModelWorkers"]


@dataclass(frozen=True)
class Prepared:
    """What one job did: `best` (the recommendation's cache entry, `(key, fields)`), the step `t`
    whose proposal it computed and its compute time in seconds; `error` if it raised."""

    t: int
    seconds: float
    best: tuple[tuple, dict | None] | None = None
    error: BaseException | None = None


def light_model(strategy: Any) -> bool:
    """Model work cheap enough for the loop thread: no model (random search), or a finite domain
    without MAP refits or adaptive exploration (a posterior update over the set and an argmax,
    ~1 ms for 50 arms). A thread hand-over (a job, a wake-up, the GIL passed back and forth)
    would cost such a plant more than it saves; its next ask computes the proposal inline. The
    rule reads the configuration only, so where work runs never depends on timing."""
    spec = strategy.spec
    if spec.strategy == "random-search":
        return True
    return bool(strategy.domain.finite and spec.hyper is None and spec.exploration is None)


class ModelWorkers:
    """A thread pool running `plant.prepare()` for plants whose next step is not computed yet.

    `start(plant)` submits a job if the plant needs one and has none running; a finished job
    wakes the loop through `wake` (the server's wake-up socket) and is handed back, on the loop
    thread, by `collect()`. `hold(plant name)`, when given, is called at the start of each job
    (the tests' fault injection, tvbod/service/faults.py: hold a plant's jobs while a fault file
    says so).
    """

    def __init__(self, threads: int, wake: socket.socket,
                 hold: Callable[[str], None] | None = None) -> None:
        self._pool = ThreadPoolExecutor(max(1, threads), "tvbod-model")
        self._wake = wake
        self._hold = hold
        self._running: dict[str, Future] = {}
        self._done: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.trim = Trimmer()  # a refit's n x n temporaries go back to the kernel (malloc.py)

    def busy(self, name: str) -> bool:
        """True while a job for plant `name` runs or waits to be collected."""
        return name in self._running

    @property
    def idle(self) -> bool:
        return not self._running

    def start(self, plant: Any, propose: bool = True) -> bool:
        """Submit `plant`'s job unless one runs or it has nothing to do: the refit a tell
        deferred and, with `propose`, the next proposal (after a tell the adapter asks next;
        after an `observe` another observation usually follows, so only an `ask` asks for one)."""
        if plant.name in self._running or not plant.needs_preparation(propose):
            return False
        if light_model(plant.strategy):
            return False  # the next ask computes it on the loop thread
        future = self._pool.submit(self._run, plant, propose)
        self._running[plant.name] = future
        future.add_done_callback(lambda _f, name=plant.name: self._finished(name))
        return True

    def _run(self, plant: Any, propose: bool) -> Prepared:
        if self._hold is not None:
            self._hold(plant.name)
        start = time.perf_counter()
        t = plant.strategy.t
        try:
            best = plant.prepare(propose)
        except Exception as exc:  # noqa: BLE001 - reported by the loop as an internal_error
            return Prepared(t, time.perf_counter() - start, error=exc)
        return Prepared(t, time.perf_counter() - start, best=best)

    def _finished(self, name: str) -> None:
        """Done callback (a worker thread): queue the plant and wake the loop's poller."""
        self._done.put(name)
        try:
            self._wake.send(b"\1")
        except OSError:  # the buffer is full (the loop is awake anyway) or the socket closed
            pass
        self.trim()

    def collect(self) -> list[tuple[str, Prepared]]:
        """The jobs finished since the last call, `(plant name, Prepared)`; the loop thread only."""
        out = []
        while True:
            try:
                name = self._done.get_nowait()
            except queue.Empty:
                return out
            future = self._running.pop(name, None)
            if future is not None:
                out.append((name, future.result()))

    def wait_all(self) -> list[tuple[str, Prepared]]:
        """Block until every running job finished; their results (reload, shutdown)."""
        out = []
        while self._running:
            for future in list(self._running.values()):
                future.result()
            out.extend(self.collect())
        return out

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
