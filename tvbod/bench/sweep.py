"""One executor for every `tvbod bench` sweep: independent seeded tasks, streamed to `runs.jsonl`.

A sweep is a list of `Task`s, each a module-level function, its arguments (plain, picklable), the
seed it derives its randomness from and a key naming it in `runs.jsonl`. Nothing a task computes
depends on which process runs it or in which order, so the engine is a choice of throughput only:

- `--workers 1`: in this process, one task after the other;
- `--workers N`: a stdlib `ProcessPoolExecutor` of N spawned processes, one BLAS thread each
  (a worker lost mid-task breaks the pool: it is rebuilt and the unfinished tasks resubmitted);
- `--scheduler tcp://HOST:8786`: a Dask distributed cluster through
  `distributed.Client(...).get_executor()` (the `cluster` extra); Dask reschedules the tasks of a
  lost worker on the others.

Every finished task is appended to `<out>/runs.jsonl` (one JSON object a line, flushed) as it
arrives; a rerun with the same `--out` skips the tasks recorded there (a torn last line, from a
sweep killed mid-write, is cut off) and `--fresh` starts over. A task that raises is reported on
stderr with its seed and traceback, the others go on, and the sweep ends with exit code 1 (a rerun
retries only the failed tasks). Progress goes to stderr: one updating line on a terminal, one line
per `max(1, todo // 20)` tasks otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Times a task may be lost with its worker before it is reported as failed (local pool).
MAX_LOST = 3
#: Fields the executor adds to a task's record in runs.jsonl.
_RESERVED = ("key", "task_s")


@dataclass(frozen=True)
class Task:
    """`fn(*args)` -> a JSON-able dict. `seed`: the seed the task draws from (for reports);
    `key`: its identity in runs.jsonl; `rank`: submission order (lower first, e.g. heaviest)."""

    key: str
    seed: int
    fn: Callable[..., dict]
    args: tuple
    rank: int = 0


def task(fn: Callable[..., dict], *args, seed: int, key: str | None = None, rank: int = 0) -> Task:
    """A `Task`; its default key names the function and hashes the arguments' reprs, so a rerun
    with any different argument (horizon, configuration, seed) never reuses a recorded result."""
    if key is None:
        digest = hashlib.sha256(repr(args).encode()).hexdigest()[:20]
        key = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}:{digest}"
    return Task(key, int(seed), fn, tuple(args), rank)


@dataclass(frozen=True)
class Failure:
    key: str
    seed: int
    error: str
    traceback: str


@dataclass(frozen=True)
class Outcome:
    """What a sweep did: `results[key]` for every finished task (recorded before or now)."""

    results: dict[str, dict]
    failures: tuple[Failure, ...]
    resumed: int
    ran: int
    wall_s: float
    task_s: float
    cpu_s: float
    engine: str

    def ordered(self, tasks: Sequence[Task]) -> list[dict]:
        return [self.results[t.key] for t in tasks]


# ---------------------------------------------------------------------- command line
def add_arguments(parser: argparse.ArgumentParser, workers: int = 2) -> None:
    """`--workers`, `--scheduler`, `--fresh`: the engine options every sweep shares."""
    parser.add_argument("--workers", type=int, default=workers,
                        help=f"local worker processes (default {workers}; 1: in this process)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                        help="run the tasks on this Dask scheduler instead (pip install "
                             "'tvbod[cluster]'; docs/sweeps.md)")
    parser.add_argument("--fresh", action="store_true",
                        help="discard <out>/runs.jsonl instead of resuming the tasks it records")


def comma_list(text: str, valid: Sequence[str], noun: str) -> tuple[str, ...]:
    """An option's comma list (`--algos gp-ucb,et-gp-ucb`): its distinct names, each one of
    `valid`, or `argparse.ArgumentTypeError` naming the unknown ones (`noun`: what a name is)."""
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown {noun} {bad or text!r}; choose from "
                                         f"{', '.join(valid)}")
    return names


def finish(args: argparse.Namespace, outcome: Outcome, doc: dict,
           figures: Callable[[], Sequence[Path]]) -> int:
    """The end of a sweep bench: the wall-time line, `doc` as `<args.out>/results.json`, and
    unless `--no-plots` the figures `figures()` writes (each path named on stderr); 0."""
    print(f"\nwall time {outcome.wall_s:.1f} s on {outcome.engine} for {outcome.ran} new tasks")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    if not args.no_plots:
        for path in figures():
            print(f"wrote {path}", file=sys.stderr)
    print(f"wrote {args.out / 'results.json'}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- in a worker
def _call(fn: Callable[..., dict], args: tuple) -> dict:
    """Run one task; never raises: `{"line": JSON text, "task_s", "cpu_s"}` (its wall and CPU
    seconds) or `{"error", "traceback"}`."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = fn(*args)
        clash = [k for k in _RESERVED if k in result]
        if clash:
            raise ValueError(f"a task result may not contain the keys {clash}")
        line = json.dumps(result, default=_plain, separators=(",", ":"))
    except Exception as exc:  # reported with the task's seed; the sweep goes on
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    return {"line": line, "task_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def _plain(obj):
    """numpy arrays and scalars as lists and Python numbers (json.dumps' `default`)."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# ---------------------------------------------------------------------- engines
class _Inline(Executor):
    """`--workers 1`: each task runs at submit, in this process."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


@dataclass
class Engine:
    """An executor, how many tasks to keep in flight (None: all) and how to recover a pool."""

    executor: Executor
    describe: str
    window: int | None
    rebuild: Callable[[], Executor] | None = None

    def recover(self, exc: BaseException) -> bool:
        """After a broken local pool: replace it (True: resubmit the lost tasks)."""
        from concurrent.futures.process import BrokenProcessPool

        if self.rebuild is None or not isinstance(exc, BrokenProcessPool):
            return False
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self.rebuild()
        return True


@contextmanager
def engine(workers: int, scheduler: str | None = None) -> Iterator[Engine]:
    if scheduler:
        with _dask(scheduler) as eng:
            yield eng
        return
    if workers <= 1:
        yield Engine(_Inline(), "1 worker (in this process)", window=1)
        return
    eng = Engine(_local_pool(workers), f"{workers} local worker processes", window=8 * workers,
                 rebuild=lambda: _local_pool(workers))
    try:
        yield eng
    finally:
        eng.executor.shutdown(wait=True, cancel_futures=True)


def _local_pool(workers: int) -> Executor:
    """A spawn-context pool whose workers pin BLAS to one thread before they import numpy."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_one_blas_thread)


def _one_blas_thread() -> None:
    """Worker initializer: runs before the first task unpickles (and imports numpy)."""
    os.environ.update({v: "1" for v in BLAS_ENV})


@contextmanager
def _dask(address: str) -> Iterator[Engine]:
    try:
        from distributed import Client
    except ImportError as exc:
        raise SystemExit("--scheduler needs Dask distributed: pip install 'tvbod[cluster]'") from exc
    client = Client(address, timeout="60s")
    try:
        threads = sum(client.nthreads().values())
        yield Engine(client.get_executor(pure=False),
                     f"Dask at {address} ({threads} worker threads)", window=None)
    finally:
        client.close()


# ---------------------------------------------------------------------- runs.jsonl
def load_runs(path: Path) -> dict[str, dict]:
    """Finished tasks of an earlier (possibly killed) sweep; a torn last line is cut off."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    text = path.read_text()
    if text and not text.endswith("\n"):  # cut a torn tail, so the next append starts a clean line
        text = text[: text.rfind("\n") + 1]
        path.write_text(text)
    for line in text.splitlines():
        try:
            record = json.loads(line)
            done[record.pop("key")] = record
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue
    for record in done.values():
        record.pop("task_s", None)
    return done


# ---------------------------------------------------------------------- the sweep
def run(tasks: Sequence[Task], args: argparse.Namespace, name: str,
        runs_path: Path | None = None) -> Outcome:
    """Run the tasks not yet in `runs_path` (default `<args.out>/runs.jsonl`) on the engine
    `args` names (`--workers`, `--scheduler`), resuming unless `args.fresh`."""
    runs_path = runs_path or Path(args.out) / "runs.jsonl"
    runs_path.parent.mkdir(parents=True, exist_ok=True)
    if getattr(args, "fresh", False) and runs_path.exists():
        runs_path.unlink()
    done = load_runs(runs_path)
    todo = sorted((t for t in dict((t.key, t) for t in tasks).values() if t.key not in done),
                  key=lambda t: t.rank)
    resumed = len({t.key for t in tasks} & done.keys())
    if resumed:
        print(f"[{name}] resuming: {resumed} of {len(tasks)} tasks already in {runs_path}",
              file=sys.stderr, flush=True)
    progress = Progress(name, len(todo))
    t0 = time.perf_counter()
    with engine(args.workers, getattr(args, "scheduler", None)) as eng, runs_path.open("a") as sink:
        print(f"[{name}] {len(todo)} tasks on {eng.describe}", file=sys.stderr, flush=True)
        failures, task_s, cpu_s = _drive(eng, todo, done, sink, progress)
    progress.finish()
    for f in failures:
        print(f"[{name}] task {f.key} (seed {f.seed}) failed: {f.error}\n{f.traceback}",
              file=sys.stderr, flush=True)
    if failures:
        print(f"[{name}] {len(failures)} of {len(todo)} tasks failed; the others are in "
              f"{runs_path}, a rerun with the same --out retries only the failed ones",
              file=sys.stderr, flush=True)
    return Outcome(done, tuple(failures), resumed, len(todo) - len(failures),
                   time.perf_counter() - t0, task_s, cpu_s, eng.describe)


def _drive(eng: Engine, todo: list[Task], done: dict, sink, progress: Progress):
    """Keep `eng.window` tasks in flight (all if None); record each result as it arrives."""
    import queue as queues

    pending = list(reversed(todo))
    arrived: queues.SimpleQueue = queues.SimpleQueue()
    flight: dict[Future, tuple[Task, int]] = {}
    generation, lost, failures, task_s, cpu_s = 0, {}, [], 0.0, 0.0

    def fill() -> None:
        while pending and (eng.window is None or len(flight) < eng.window):
            t = pending.pop()
            fut = eng.executor.submit(_call, t.fn, t.args)
            flight[fut] = (t, generation)
            fut.add_done_callback(arrived.put)

    fill()
    while flight:
        fut = arrived.get()
        t, gen = flight.pop(fut)
        try:
            out = fut.result()
        except Exception as exc:  # the engine lost the task: its worker died
            if gen == generation and eng.recover(exc):
                generation += 1  # the old pool's other tasks arrive here too, and are resubmitted
                print(f"[{progress.name}] a worker process died ({type(exc).__name__}); the pool "
                      f"is restarted and its {1 + len(flight)} unfinished tasks resubmitted",
                      file=sys.stderr, flush=True)
            lost[t.key] = lost.get(t.key, 0) + 1
            if eng.rebuild is not None and lost[t.key] <= MAX_LOST:
                pending.append(t)
                fill()
                continue
            out = {"error": f"worker lost: {type(exc).__name__}: {exc}", "traceback": ""}
        if "error" in out:
            failures.append(Failure(t.key, t.seed, out["error"], out["traceback"]))
        else:
            record = json.loads(out["line"])
            sink.write(json.dumps({**record, "key": t.key, "task_s": round(out["task_s"], 4)},
                                  separators=(",", ":")) + "\n")
            sink.flush()
            done[t.key] = record
            task_s += out["task_s"]
            cpu_s += out["cpu_s"]
        progress.step(failed="error" in out)
        fill()
    return failures, task_s, cpu_s


class Progress:
    """`[name] done/total, failed, elapsed, ETA` on stderr: rewritten in place on a terminal, else
    one line every `every` tasks (and at the last)."""

    def __init__(self, name: str, total: int, stream=None) -> None:
        self.name, self.total, self.stream = name, total, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = max(1, math.ceil(total / 20))
        self.done = self.failed = 0
        self.t0 = time.perf_counter()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        left = self.total - self.done
        eta = _clock(elapsed / self.done * left) if self.done else "?"
        return (f"[{self.name}] {self.done}/{self.total} tasks, {self.failed} failed, "
                f"elapsed {_clock(elapsed)}, ETA {eta}")

    def step(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += bool(failed)
        if self.tty:
            print(f"\r{self.line()}\033[K", end="", file=self.stream, flush=True)
        elif self.done % self.every == 0 or self.done == self.total:
            print(self.line(), file=self.stream, flush=True)

    def finish(self) -> None:
        if self.tty and self.done:
            print(file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
