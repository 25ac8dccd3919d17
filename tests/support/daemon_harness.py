"""A real daemon in a subprocess, configured in a temporary directory, for tests of every layer."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import zmq

from plant_adapters.client import DaemonClient, DaemonUnavailable
from tvbod.protocol import decode_reply, encode

PLANT_BOX = """\
name: {name}
parameters:
  - {{name: kp, lower: 0.0, upper: 2.0, unit: "1"}}
  - {{name: ki, lower: -1.0, upper: 1.0, unit: "1/s"}}
sense: {sense}
proposal_timeout: {timeout}
failure: {{policy: penalty, value: {penalty}}}
optimizer:
  strategy: et-gp-ucb
  kernel: {{lengthscales: 0.3}}
  noise_variance: 0.01
  measurement: {measurement}
  budget: {budget}
  seed: {seed}
{extra}"""


#: A plant file with `safety:` (seeds and steps by parameter name), for the safe-tuning tests.
SAFE_PLANT = """\
name: alpha
parameters:
  - {name: kp, lower: 0.0, upper: 2.0, unit: "1"}
  - {name: ki, lower: -1.0, upper: 1.0, unit: "1/s"}
sense: minimize
proposal_timeout: 60
safety:
  max_cost: 1.2
  safe_seeds: [{kp: 1.0, ki: 0.2}]
  max_step: {kp: 0.5}
optimizer:
  strategy: et-gp-ucb
  kernel: {lengthscales: 0.3}
  noise_variance: 0.01
  measurement: {offset: 0.0, scale: 1.0}
  budget: {candidates: 256, starts: 2, maxiter: 20}
  seed: 1
"""


def plant_yaml(name: str, **kw) -> str:
    """`PLANT_BOX` with defaults; `extra` adds `optimizer:` lines (indented by two spaces)."""
    values = {"name": name, "sense": "minimize", "timeout": 60, "penalty": 10.0, "seed": 1, "extra": "",
              "measurement": "{offset: 0.0, scale: 1.0}",  # `objective` is on the GP's scale
              "budget": "{candidates: 256, starts: 2, maxiter: 20}"}
    values.update(kw)
    return PLANT_BOX.format(**values)


def arms_plant_yaml(name: str, matrix: list[list[float]], noise: str = "0.01",
                    seed: int = 1) -> str:
    """A finite-domain plant, one arm per row of the kernel `matrix` (the startup bench's file);
    `noise` is written as given, so `1` and `1.0` stay distinct YAML."""
    from tvbod.bench.startup import PLANT

    return PLANT.format(name=name, arms=len(matrix), noise=noise, seed=seed, matrix=matrix)


def objective(gains: dict, t: int) -> float:
    """A deterministic plant response that jumps at t = 15, for session tests."""
    kp, ki = gains["kp"], gains["ki"]
    return float((kp - 1.2) ** 2 + 0.5 * (ki - 0.3) ** 2 + (1.5 if t >= 15 else 0.0))


def offline_site(root: Path) -> Path:
    """A daemon file with its own, not yet created, state directory and the plant `alpha`, for
    the offline commands (import); returns the daemon file."""
    (root / "plants").mkdir(parents=True)
    (root / "plants" / "alpha.yaml").write_text(plant_yaml("alpha"))
    (root / "tvbod.yaml").write_text(textwrap.dedent("""\
        runtime_dir: ./run
        state_dir: ./state
        plants: "plants/*.yaml"
        checkpoint_every: 5
        """))
    return root / "tvbod.yaml"


def _kill_if_running(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Daemon:
    """`tvbod run` as a child process on an ipc endpoint in `root`."""

    def __init__(self, root: Path, plants: dict[str, dict] | None = None, checkpoint_every: int = 5,
                 env: dict | None = None, extra: str = "", existing: bool = False) -> None:
        """`existing`: `root` already holds tvbod.yaml, plants/ and state/ (e.g. a fixture)."""
        self.root = root
        self.endpoint = f"ipc://{root}/run/tvbod.sock"
        self.state = root / "state"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.log = root / "daemon.log"
        if existing:
            return
        (root / "plants").mkdir(parents=True, exist_ok=True)
        (root / "tvbod.yaml").write_text(textwrap.dedent(f"""\
            endpoints: ["ipc://{{runtime_dir}}/tvbod.sock"]
            runtime_dir: ./run
            state_dir: ./state
            log_format: json
            plants: "plants/*.yaml"
            checkpoint_every: {checkpoint_every}
            """) + textwrap.dedent(extra))
        for name, kw in (plants or {"alpha": {}}).items():
            (root / "plants" / f"{name}.yaml").write_text(plant_yaml(name, **kw))

    def start(self, wait: bool = True) -> Daemon:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tvbod", "run", "--config", str(self.root / "tvbod.yaml")],
            stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.root)
        out.close()
        atexit.register(_kill_if_running, self.proc)  # a failed test must not leave daemons behind
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                self.client("alpha", timeout_s=0.3, retries=0).ping()
                return
            except DaemonUnavailable:
                time.sleep(0.05)
        raise TimeoutError("daemon did not answer ping")

    def client(self, plant: str = "alpha", **kw) -> DaemonClient:
        kw.setdefault("timeout_s", 5.0)
        return DaemonClient(self.endpoint, plant, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def events(self, plant: str = "alpha") -> list[dict]:
        from tvbod.service.event_files import read_events

        return read_events(self.state / "plants" / plant / "events.jsonl")

    def log_events(self) -> list[dict]:
        import json

        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


class RawPeer:
    """A bare DEALER for sending arbitrary frames (no retries, no validation)."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send_frames(self, frames: list[bytes], timeout: float = 5.0) -> dict | None:
        self.sock.send_multipart(frames)
        if not self.sock.poll(int(timeout * 1000)):
            return None
        return decode_reply(self.sock.recv_multipart()[-1])

    def send(self, msg: dict, timeout: float = 5.0) -> dict | None:
        return self.send_frames([encode(msg)], timeout)

    def close(self) -> None:
        self.sock.close(linger=0)


class KillSchedule:
    """SIGKILLs a daemon after given steps, at a random moment of the next exchange.

    The client calls `gate(step)` before starting each step: it may not start step `s` until
    every kill scheduled after step `s - 2` has happened, so a fast client cannot outrun the
    schedule (each kill lands while step `target + 1` is in flight or just before it)."""

    def __init__(self, daemon: Daemon, targets: list[int], rng) -> None:
        import threading

        self.daemon, self.targets, self.rng = daemon, sorted(targets), rng
        self.progress = 0
        self.kills = 0
        self.done = threading.Event()
        self._cond = threading.Condition()
        self.thread = threading.Thread(target=self._run)

    def gate(self, step: int) -> None:
        with self._cond:
            owed = sum(t <= step - 2 for t in self.targets)
            self._cond.wait_for(lambda: self.kills >= owed or self.done.is_set(), timeout=120)

    def completed(self, step: int) -> None:
        with self._cond:
            self.progress = step
            self._cond.notify_all()

    def _run(self) -> None:
        for target in self.targets:
            with self._cond:
                self._cond.wait_for(lambda: self.progress >= target or self.done.is_set())
            if self.done.is_set():
                return
            time.sleep(self.rng.uniform(0.0, 0.012))
            self.daemon.proc.kill()
            self.daemon.proc.wait()
            self.daemon.start()  # waits until the new daemon answers
            with self._cond:
                self.kills += 1
                self._cond.notify_all()

    def __enter__(self) -> "KillSchedule":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        with self._cond:
            self._cond.notify_all()
        self.thread.join(600)


def measurement_history(d: Daemon, plant: str = "alpha") -> list[tuple]:
    """The plant's measurements from its events file, first record per proposal id (a retried
    tell is logged again), by step: `(t, proposal_id, x, measurement, reset, psi)`."""
    seen: dict[str, dict] = {}
    for e in d.events(plant):
        if e["event"] == "measurement":
            seen.setdefault(e["proposal_id"], e)
    return [(e["t"], e["proposal_id"], tuple(e["x"]), e["measurement"], e["reset"], e["psi"])
            for e in sorted(seen.values(), key=lambda e: e["t"])]


def drive(d: Daemon, steps: int, schedule: KillSchedule | None = None, timeout_s: float = 0.4,
          log: list | None = None) -> int:
    """Ask/tell `objective` for `steps` steps through a retrying client, gated by `schedule` (if any)
    so that every scheduled kill lands inside the session; returns the client's reconnect count.
    With `log`, every request and reply is appended to it (`history.LoggingClient`)."""
    from history import LoggingClient

    client = (d.client(timeout_s=timeout_s, retries=400) if log is None else
              LoggingClient(d.endpoint, "alpha", timeout_s=timeout_s, retries=400, log=log))
    with client as c:
        for step in range(1, steps + 1):
            if schedule is not None:
                schedule.gate(step)
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            if schedule is not None:
                schedule.completed(step)
        return c.reconnects


def assert_bounded_recovery(d: Daemon, plant: str, checkpoint_every: int, kill_targets: list[int],
                            steps: int) -> None:
    """After a kill loop: no start replayed more than one checkpoint interval plus the longest
    lifetime's records (2 per step, +2 for the step in flight at the kill), so journals stay
    bounded and restart work is flat however long the loop runs (counted in records, not in
    seconds); and every step has exactly one `measurement` line (a replayed record is logged
    again only when its line is missing, at most once per kill)."""
    events = d.events(plant)
    restored = [e for e in events if e["event"] == "plant_restored"]
    targets = sorted(kill_targets)
    lifetime = 2 * max(b - a for a, b in zip([0] + targets, targets + [steps])) + 2
    replayed = [e["replayed"] for e in restored]
    assert max(replayed) <= checkpoint_every + lifetime, replayed
    lines = sum(e["event"] == "measurement" for e in events)
    assert lines == steps and sum(e["relogged"] for e in restored) <= len(targets)
