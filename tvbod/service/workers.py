"""Model work off the reply path: each plant's job (its next step's model work) on a worker
thread or process.

A tell is answered once its record is journaled and the trigger has decided. What only shapes
the next step (the MAP refit and exploration update a tell defers, `Strategy.settle`, the next
proposal and the recommendation `best` reads) runs here, on a small thread pool, while the loop
thread keeps answering every other plant; numpy and LAPACK release the GIL for the heavy parts.

At most one job runs per plant, and while it runs the loop does not touch that plant's strategy:
requests for the plant are parked (`Server`) and answered, in arrival order, when the job is
collected. The job computes exactly what the next `ask` would have computed on the loop thread,
from the same state, so no result depends on timing: replay stays bit-exact, and a SIGKILL
during a job loses nothing (the job's output is recomputed from the journal after a restart).

Two kinds of workers (the daemon file's `model_workers` and `model_worker_kind`):
- `thread` (`ModelWorkers`): the job runs on the plant's own strategy in a thread. Cheap to hand
  over, but the job's Python code (the polish's L-BFGS-B iterations, the refit's bookkeeping)
  takes the GIL from the loop thread, so under load every reply waits behind model work.
- `process` (`ProcessModelWorkers`): the strategy is pickled to a worker process, the job runs there
  and pickled back (its cost: docs/benchmarks.md, *The daemon*), and the loop adopts the
  copy; model work then never holds the loop's GIL. Pickling is exact (protocol 4: every array
  bit for bit), so both kinds compute the same numbers. Each worker process costs its own
  interpreter's memory (docs/benchmarks.md, *The daemon*).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import socket
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable

from tvbod.core.recommend import recommend
from tvbod.service.malloc import Trimmer

__all__ = ["JobResult", "ModelWorkers", "ProcessModelWorkers", "run_job"]
#: Pickle protocol of the strategy's round trip: 4 copies every array into its own buffer (5
#: without out-of-band buffers would too; 4 says so without reading numpy's reducer).
_PICKLE_PROTOCOL = 4


def run_job(strategy: Any, propose: bool):
    """The model job itself: the deferred refit (`settle`), with `propose` the next proposal, and
    the recommendation `best` reads (tvbod/core/recommend.py), returned."""
    strategy.settle()
    if propose:
        strategy.ask()
    rec = recommend(strategy)
    strategy.compact()  # the factor packed until the next read (docs/benchmarks.md, *The daemon*)
    return rec


@dataclass(frozen=True)
class JobResult:
    """What one job did: `best` (the recommendation's cache entry, `(key, fields)`), the step `t`
    whose proposal it computed and its compute time in seconds; `error` if it raised."""

    t: int
    seconds: float
    best: tuple[tuple, dict | None] | None = None
    error: BaseException | None = None


def light_model(strategy: Any) -> bool:
    """Model work cheap enough for the loop thread: no model (random search), or a finite domain
    without MAP refits or adaptive exploration (a posterior update over the set and an
    argmax). A thread hand-over (a job, a wake-up, the GIL passed back and forth)
    would cost such a plant more than it saves; its next ask computes the proposal inline. The
    rule reads the configuration only, so where work runs never depends on timing."""
    spec = strategy.spec
    if spec.strategy == "random-search":
        return True
    return bool(strategy.domain.finite and spec.hyper is None and spec.exploration is None)


class ModelWorkers:
    """A thread pool running `plant.run_job()` for plants whose next step is not computed yet.

    `start(plant)` submits a job if the plant needs one and has none running; a finished job
    wakes the loop through `wake` (the server's wake-up socket) and is handed back, on the loop
    thread, by `collect()`. `hold(plant name)`, when given, is called at the start of each job
    (the tests' fault injection, tvbod/service/faults.py: hold a plant's jobs while a fault file
    says so).
    """

    def __init__(self, workers: int, wake: socket.socket,
                 hold: Callable[[str], None] | None = None) -> None:
        self._workers = max(1, workers)
        self._pool = self._new_pool()
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
        if plant.name in self._running or not plant.has_work(propose):
            return False
        if light_model(plant.strategy):
            return False  # the next ask computes it on the loop thread
        future = self._submit(plant, propose)
        self._running[plant.name] = future
        future.add_done_callback(lambda _f, name=plant.name: self._finished(name))
        return True

    def _new_pool(self):
        return ThreadPoolExecutor(self._workers, "tvbod-model")

    def _submit(self, plant: Any, propose: bool) -> Future:
        return self._pool.submit(self._run, plant, propose)

    def _outcome(self, name: str, future: Future) -> JobResult:
        """The finished job's `JobResult`, on the loop thread."""
        return future.result()

    def _run(self, plant: Any, propose: bool) -> JobResult:
        if self._hold is not None:
            self._hold(plant.name)
        start = time.perf_counter()
        t = plant.strategy.t
        try:
            best = plant.run_job(propose)
        except Exception as exc:  # noqa: BLE001 - reported by the loop as an internal_error
            return JobResult(t, time.perf_counter() - start, error=exc)
        return JobResult(t, time.perf_counter() - start, best=best)

    def _finished(self, name: str) -> None:
        """Done callback (a worker thread): queue the plant and wake the loop's poller."""
        self._done.put(name)
        try:
            self._wake.send(b"\1")
        except OSError:  # the buffer is full (the loop is awake anyway) or the socket closed
            pass
        self.trim()

    def collect(self) -> list[tuple[str, JobResult]]:
        """The jobs finished since the last call, `(plant name, JobResult)`; the loop thread only."""
        out = []
        while True:
            try:
                name = self._done.get_nowait()
            except queue.Empty:
                return out
            future = self._running.pop(name, None)
            if future is not None:
                out.append((name, self._outcome(name, future)))

    def wait_all(self) -> list[tuple[str, JobResult]]:
        """Block until every running job finished; their results (reload, shutdown)."""
        out = []
        while self._running:
            for future in list(self._running.values()):
                future.exception()  # waits; the outcome (or error) is read by `collect`
            out.extend(self.collect())
        return out

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


#: A process worker's fault hold (tvbod/service/faults.py), read from its environment at start.
_PROCESS_HOLD: Callable[[str], None] | None = None


def _start_process_worker(daemon_pid: int) -> None:
    """A worker process's start. It dies with the daemon: a pool's workers hold both ends of
    their task pipe, so a SIGKILLed daemon would leave them waiting forever (measured: orphans
    after every kill test); Linux's PR_SET_PDEATHSIG sends them SIGKILL when the daemon dies
    (and a daemon already gone by now ends the worker at once). Ctrl-C in a terminal reaches
    the whole process group, but stopping is the daemon's decision, so SIGINT is ignored."""
    global _PROCESS_HOLD
    import ctypes
    import signal

    from tvbod.service.faults import from_environment

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker ends when its task pipe does, at the daemon's shutdown
    if os.getppid() != daemon_pid:
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _PROCESS_HOLD = from_environment()[2]


def _process_job(name: str, blob: bytes, propose: bool) -> tuple[bytes, Any, float]:
    """In a worker process: `run_job` on the pickled strategy; it, pickled back, the
    recommendation and the compute time."""
    if _PROCESS_HOLD is not None:
        _PROCESS_HOLD(name)
    start = time.perf_counter()
    strategy = pickle.loads(blob)
    rec = run_job(strategy, propose)
    return pickle.dumps(strategy, _PICKLE_PROTOCOL), rec, time.perf_counter() - start


class ProcessModelWorkers(ModelWorkers):
    """`ModelWorkers` whose jobs run in worker processes (spawned: the daemon has threads) on a
    pickled copy of the plant's strategy, which the loop adopts when it collects the job.

    A worker process that dies (killed, out of memory) fails its jobs, not the daemon: the
    plants keep their own strategy, unchanged, the pool is replaced, and the next request that
    needs the work starts it again (`JobResult.error` reports the loss as an internal_error)."""

    def __init__(self, processes: int, wake: socket.socket,
                 hold: Callable[[str], None] | None = None) -> None:
        super().__init__(processes, wake, None)  # `hold` is read by each process at its start
        self._plants: dict[str, Any] = {}

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._workers, multiprocessing.get_context("spawn"),
                                   initializer=_start_process_worker, initargs=(os.getpid(),))

    def _submit(self, plant: Any, propose: bool) -> Future:
        blob = pickle.dumps(plant.strategy, _PICKLE_PROTOCOL)
        try:
            future = self._pool.submit(_process_job, plant.name, blob, propose)
        except BrokenProcessPool:
            self._pool = self._new_pool()
            future = self._pool.submit(_process_job, plant.name, blob, propose)
        self._plants[plant.name] = (plant, plant.strategy.t, self._pool)
        return future

    def _outcome(self, name: str, future: Future) -> JobResult:
        plant, t, pool = self._plants.pop(name)
        try:
            blob, rec, seconds = future.result()
        except BrokenProcessPool as exc:
            if pool is self._pool:  # the first of its failed jobs replaces the pool
                pool.shutdown(wait=False)
                self._pool = self._new_pool()
            return JobResult(t, 0.0, error=exc)
        except Exception as exc:  # noqa: BLE001 - reported by the loop as an internal_error
            return JobResult(t, 0.0, error=exc)
        return JobResult(t, seconds, best=plant.adopt(pickle.loads(blob), rec))
