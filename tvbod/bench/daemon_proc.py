"""A real `tvbod run` subprocess for the daemon benchmarks: start, READY, CPU, memory, stop.

The daemon is started with `$NOTIFY_SOCKET` pointing at a datagram socket this process binds, so
time to READY is the daemon's own `READY=1` (sd_notify: configs validated, state restored, sockets
bound), not a guess. CPU and memory come from `/proc`: utime + stime of the daemon and of every
live descendant (a worker process pool counts too), VmRSS / VmHWM of the same processes, and the
time their threads waited for a CPU (schedstat), which tells a busy machine from a slow daemon.
Nothing here raises on a deadline: `wait_ready` returns None and the caller reports what it has.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def write_daemon_file(root: Path, endpoint: str, model_workers: str = "thread",
                      checkpoint_every: int | None = None) -> Path:
    """`root/tvbod.yaml`: the given endpoint, state and runtime under `root`, plants in
    `root/plants/*.yaml`, model jobs run by `model_workers` (`thread` or `process`), and
    `checkpoint_every` when given (else the daemon's default)."""
    (root / "plants").mkdir(parents=True, exist_ok=True)
    path = root / "tvbod.yaml"
    path.write_text(textwrap.dedent(f"""\
        endpoints: ["{endpoint}"]
        runtime_dir: ./run
        state_dir: ./state
        log_format: json
        plants: "plants/*.yaml"
        model_worker_kind: {model_workers}
        """) + (f"checkpoint_every: {checkpoint_every}\n" if checkpoint_every else ""))
    return path


def _descendants(pid: int) -> list[int]:
    """`pid` and its live descendants (from each process's ppid in /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and its live descendants, in seconds (nan if `pid` is gone)."""
    total, seen = 0.0, False
    for p in _descendants(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seen = True
        total += (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14, 15 of proc(5)
    return total if seen else float("nan")


def runqueue_seconds(pid: int) -> float:
    """Time the threads of `pid` and its live descendants spent runnable but waiting for a CPU
    (the second field of /proc/<pid>/task/<tid>/schedstat), in seconds; nan if unavailable.
    A large share of a phase means the machine, not the daemon, set the pace."""
    total, seen = 0.0, False
    for p in _descendants(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                total += int(Path(f"/proc/{p}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
                seen = True
            except (OSError, IndexError, ValueError):
                continue
    return total if seen else float("nan")


def memory_mb(pid: int) -> dict[str, float]:
    """`{"rss_mb", "hwm_mb"}`: VmRSS and VmHWM summed over `pid` and its live descendants."""
    out = {"rss_mb": 0.0, "hwm_mb": 0.0}
    keys = {"VmRSS:": "rss_mb", "VmHWM:": "hwm_mb"}
    seen = False
    for p in _descendants(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        seen = True
        for line in lines:
            key = keys.get(line.split(":", 1)[0] + ":")
            if key:
                out[key] += int(line.split()[1]) / 1024
    return out if seen else {"rss_mb": float("nan"), "hwm_mb": float("nan")}


class DaemonProcess:
    """`python -m tvbod run --config root/tvbod.yaml`, its output in `root/daemon.log`."""

    def __init__(self, root: Path, log_name: str = "daemon.log") -> None:
        self.root = root
        self.log_path = root / log_name
        self.notify_path = root / "notify.sock"
        self.proc: subprocess.Popen | None = None
        self.started = float("nan")
        self._notify: socket.socket | None = None

    def start(self) -> None:
        self.notify_path.unlink(missing_ok=True)
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(str(self.notify_path))
        self._notify.setblocking(False)
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "NOTIFY_SOCKET": str(self.notify_path)}
        env.pop("WATCHDOG_USEC", None)
        self.started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tvbod", "run", "--config", str(self.root / "tvbod.yaml")],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def notify_fd(self) -> int:
        assert self._notify is not None
        return self._notify.fileno()

    def drain_notifications(self) -> list[str]:
        """Every datagram the daemon sent since the last call (so its queue never fills)."""
        out = []
        while self._notify is not None:
            try:
                out.append(self._notify.recv(8192).decode("utf-8", "replace"))
            except (BlockingIOError, InterruptedError):
                break
        return out

    def wait_ready(self, timeout_s: float) -> float | None:
        """Seconds from the start to `READY=1`; None if the daemon exited or `timeout_s` passed."""
        deadline = self.started + timeout_s
        while self.alive() and time.monotonic() < deadline:
            for message in self.drain_notifications():
                if "READY=1" in message.splitlines():
                    return time.monotonic() - self.started
            time.sleep(0.02)
        return None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """SIGTERM (a final checkpoint), then SIGKILL after `timeout_s`; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self._notify is not None:
            self._notify.close()
            self._notify = None
        return self.proc.returncode
