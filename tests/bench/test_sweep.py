"""The sweep executor (`tvbod.bench.sweep`): the same results on every engine (in-process, a spawn
pool, a real Dask scheduler and workers on loopback), a lost worker's task retried, a killed sweep
resumed without redoing finished tasks, failures reported with their seed and traceback, progress.

The sweep under test is `tvbod bench stopping-time` on a 10 x 10 grid (tasks of ~0.1 s)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tvbod.bench import sweep

import sweep_tasks
from doc_blocks import marked_block
from probes import loaded_modules, wait_for

ROOT = Path(__file__).resolve().parents[2]
DASK = Path(sys.executable).parent / "dask"
#: 20 runs x 2 eps = 40 tasks
SMALL = ["bench", "stopping-time", "--runs", "20", "--grid", "10", "--no-plots"]
TASKS = 40
TIMING = {"wall_time_s", "engine", "new_tasks", "task_s_total", "task_cpu_s_total"}


def _cli(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tvbod", *argv], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, **kw)


def _results(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())
    return {k: v for k, v in doc.items() if k not in TIMING}




def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")] \
        if path.exists() else []


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> dict:
    """The reference: the small sweep on the local spawn pool with 2 workers."""
    out = tmp_path_factory.mktemp("local")
    proc = _cli([*SMALL, "--workers", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert f"[stopping-time] {TASKS} tasks on 2 local worker processes" in proc.stderr
    return _results(out)


# ---------------------------------------------------------------------- a real Dask cluster
class Cluster:
    """`dask scheduler` and `dask worker` processes on loopback (no nanny: a killed worker stays
    dead), and a client to watch them."""

    def __init__(self, path: Path) -> None:
        self.path, self.workers = path, []
        self.file = path / "scheduler.json"
        self.scheduler = subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(self.file)], stdout=subprocess.DEVNULL,
            stderr=(path / "scheduler.log").open("w"))
        wait_for(lambda: self.file.exists() and self.file.stat().st_size, what="the scheduler")
        from distributed import Client

        self.client = Client(scheduler_file=str(self.file), timeout="60s")
        self.address = self.client.scheduler.address

    def start_worker(self) -> subprocess.Popen:
        log = (self.path / f"worker{len(self.workers)}.log").open("w")
        worker = subprocess.Popen(
            [str(DASK), "worker", "--scheduler-file", str(self.file), "--nthreads", "1",
             "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        self.workers.append(worker)
        return worker

    def alive(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def close(self) -> None:
        self.client.close()
        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers, self.scheduler]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("distributed", reason="the cluster extra (make test installs it)")
    c = Cluster(tmp_path_factory.mktemp("dask"))
    try:
        c.start_worker()
        c.start_worker()
        wait_for(lambda: c.alive() == 2, what="two workers")
        yield c
    finally:
        c.close()


def test_sweeps_cluster_recipe_gives_the_local_pools_results(local_run, tmp_path):
    # docs/sweeps.md's block as one bash script from a checkout (.venv is this interpreter's venv),
    # with the scheduler's port 8786 replaced by a free one so two suites on a host cannot clash.
    pytest.importorskip("distributed", reason="the cluster extra (make test installs it)")
    block = marked_block("docs/sweeps.md", "test_sweeps_cluster_recipe_gives_the_local_pools_results",
                         file="tests/bench/test_sweep.py")
    assert f"stopping-time {' '.join(SMALL[2:])} --out st-cluster" in block
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    script = ("set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
              + block.replace(":8786", f":{port}").replace("--port 8786", f"--port {port}") + "\n")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{TASKS} tasks on Dask at tcp://127.0.0.1:{port}" in proc.stderr
    assert _results(tmp_path / "st-cluster") == local_run
    assert len(_lines(tmp_path / "st-cluster" / "runs.jsonl")) == TASKS


def test_a_worker_killed_mid_sweep_loses_nothing(cluster, local_run, tmp_path):
    doomed = cluster.start_worker()
    wait_for(lambda: cluster.alive() == 3, what="a third worker")
    address = next(a for a, pid in cluster.client.run(os.getpid).items() if pid == doomed.pid)
    sweep_proc = subprocess.Popen([sys.executable, "-m", "tvbod", *SMALL, "--scheduler",
                                   cluster.address, "--out", str(tmp_path)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # kill it while it holds a task of the running sweep
        wait_for(lambda: cluster.client.processing([address]).get(address), what="its task")
        assert sweep_proc.poll() is None
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
        out, err = sweep_proc.communicate(timeout=300)
    finally:
        if sweep_proc.poll() is None:
            sweep_proc.kill()
    assert sweep_proc.returncode == 0, err
    assert _results(tmp_path) == local_run
    assert len(_lines(tmp_path / "runs.jsonl")) == TASKS  # each task recorded once
    assert cluster.alive() == 2


def _pool_workers(pid: int) -> list[int]:
    """The spawn-pool workers among `pid`'s children (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    out = []
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(int(child))
        except FileNotFoundError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_a_local_worker_killed_mid_sweep_is_replaced_and_loses_nothing(local_run, tmp_path):
    runs = tmp_path / "runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tvbod", *SMALL, "--workers", "2",
                             "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        workers = wait_for(lambda: len(_lines(runs)) >= 1 and _pool_workers(proc.pid),
                            what="a running pool")
        assert proc.poll() is None
        os.kill(workers[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "a worker process died (BrokenProcessPool); the pool is restarted" in err
    assert _results(tmp_path) == local_run
    assert len(_lines(runs)) == TASKS


# ---------------------------------------------------------------------- kill and resume
def test_a_killed_sweep_resumes_without_redoing_finished_tasks(local_run, tmp_path):
    runs = tmp_path / "runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tvbod", *SMALL, "--workers", "2",
                             "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: len(_lines(runs)) >= 3 or proc.poll() is not None, what="3 tasks")
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its pool workers, mid-sweep
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = _lines(runs)
    assert 3 <= len(before) < TASKS
    # the rerun (on another engine: in-process) resumes and redoes none of the recorded tasks
    again = _cli([*SMALL, "--workers", "1", "--out", str(tmp_path)])
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(before)} of {TASKS} tasks already in" in again.stderr
    after = _lines(runs)
    assert after[: len(before)] == before and len(after) == TASKS
    assert len({json.loads(line)["key"] for line in after}) == TASKS
    assert _results(tmp_path) == local_run


# ---------------------------------------------------------------------- the executor itself
def _args(out: Path, workers: int = 2, fresh: bool = False) -> argparse.Namespace:
    return argparse.Namespace(out=out, workers=workers, scheduler=None, fresh=fresh)


def test_a_failing_task_is_reported_with_seed_and_traceback_and_the_rest_run(tmp_path, capsys):
    tasks = [sweep.task(sweep_tasks.square_root, x, seed=100 + i) for i, x in
             enumerate([4.0, -1.0, 9.0, 16.0])]
    outcome = sweep.run(tasks, _args(tmp_path), "roots")
    (failure,) = outcome.failures
    assert (failure.key, failure.seed) == (tasks[1].key, 101)
    assert "math domain error" in failure.error and "square_root" in failure.traceback
    assert [outcome.results[t.key]["root"] for t in (tasks[0], tasks[2], tasks[3])] == [2, 3, 4]
    err = capsys.readouterr().err
    assert f"task {tasks[1].key} (seed 101) failed: ValueError: math domain error" in err
    assert "Traceback (most recent call last)" in err and "1 of 4 tasks failed" in err
    # a rerun retries only the failed task
    again = sweep.run(tasks, _args(tmp_path, workers=1), "roots")
    assert again.resumed == 3 and len(again.failures) == 1
    assert len(_lines(tmp_path / "runs.jsonl")) == 3


def test_local_pool_workers_get_one_blas_thread_and_the_parent_keeps_its_own(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    tasks = [sweep.task(sweep_tasks.blas_threads, i, seed=i) for i in range(6)]
    results = sweep.run(tasks, _args(tmp_path, workers=2), "blas").ordered(tasks)
    assert {r["OPENBLAS_NUM_THREADS"] for r in results} == {"1"}
    assert os.getpid() not in {r["pid"] for r in results}
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_a_torn_tail_is_cut_and_fresh_starts_over(tmp_path):
    tasks = [sweep.task(sweep_tasks.square_root, float(x), seed=x) for x in range(3)]
    assert sweep.run(tasks, _args(tmp_path, workers=1), "roots").ran == 3
    runs = tmp_path / "runs.jsonl"
    with runs.open("a") as f:
        f.write('{"x": 7.0, "ro')  # killed mid-write
    assert sorted(sweep.load_runs(runs)) == sorted(t.key for t in tasks)
    assert runs.read_text().endswith("}\n")
    assert sweep.run(tasks, _args(tmp_path, workers=1), "roots").ran == 0
    assert sweep.run(tasks, _args(tmp_path, workers=1, fresh=True), "roots").ran == 3
    assert len(_lines(runs)) == 3


def test_task_keys_change_with_any_argument():
    a = sweep.task(sweep_tasks.square_root, 1.0, seed=0)
    assert a.key == sweep.task(sweep_tasks.square_root, 1.0, seed=5).key  # the seed is derived
    assert a.key != sweep.task(sweep_tasks.square_root, 1.0000001, seed=0).key


def test_progress_prints_one_line_per_n_tasks_when_not_a_terminal(tmp_path):
    log = (tmp_path / "err.txt").open("w")
    p = sweep.Progress("demo", 45, stream=log)
    for i in range(45):
        p.step(failed=i == 1)
    p.finish()
    log.close()
    lines = (tmp_path / "err.txt").read_text().splitlines()
    assert p.every == 3 and len(lines) == 15
    assert lines[0].startswith("[demo] 3/45 tasks, 1 failed, elapsed ")
    assert "ETA" in lines[0] and lines[-1].startswith("[demo] 45/45 tasks, 1 failed")


def test_progress_rewrites_one_line_on_a_terminal():
    import pty

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        p = sweep.Progress("demo", 3, stream=tty)
        for _ in range(3):
            p.step()
        p.finish()
    import select

    chunks = []
    while select.select([master], [], [], 1.0)[0]:
        try:
            chunks.append(os.read(master, 4096))
        except OSError:  # the other side is closed and drained
            break
    os.close(master)
    text = b"".join(chunks).decode()
    assert p.tty and text.count("\n") == 1  # one line, rewritten after each "\r"
    assert [line.split(" tasks")[0] for line in text.split("\r") if line.strip()] == [
        "[demo] 1/3", "[demo] 2/3", "[demo] 3/3"]
    assert "[demo] 1/3 tasks" in text and text.rstrip().endswith("[demo] 3/3 tasks, 0 failed, "
                                                                  "elapsed 0:00, ETA 0:00\x1b[K")


def test_the_daemon_never_imports_distributed():
    loaded = loaded_modules("from tvbod.commands import build_parser\n"
                            "build_parser().parse_args(['run', '--config', 'x.yaml'])",
                            walk=("tvbod.core", "tvbod.service"))
    assert not {m for m in loaded if m.split(".")[0] in ("distributed", "dask")}
