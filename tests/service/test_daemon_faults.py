"""Fault and load behaviour over real processes. Long loops run with TVBOD_LONG_TESTS=1
(100 SIGKILLs, 100,000 fuzzed frames); the default keeps CI short and still proves each property."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
from daemon_harness import (
    Daemon, KillSchedule, RawPeer, assert_bounded_recovery, drive, measurement_history,
)
from history import LoggingClient, check_history

from plant_adapters.client import DaemonClient

LONG = os.environ.get("TVBOD_LONG_TESTS") == "1"
REPO = Path(__file__).resolve().parents[2]


def _shipped_cartpole_daemon(root: Path) -> Daemon:
    d = Daemon(root)
    (root / "plants" / "alpha.yaml").unlink()
    (root / "plants" / "cartpole.yaml").write_text((REPO / "configs/plants/cartpole.yaml").read_text())
    return d


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _cartpole_session(d, steps, schedule=None, log=None):
    from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, FrictionProfile

    plant = CartPolePlant(CartPoleParams(), FrictionProfile.jump(2.2e-3, 2.5, steps // 2), seed=3)
    names = ("k_x", "k_xd", "k_phi", "k_phid")
    kind, extra = (DaemonClient, {}) if log is None else (LoggingClient, {"log": log})
    with kind(d.endpoint, "cartpole", timeout_s=0.5, retries=1000, adapter="cart", **extra) as c:
        for step in range(1, steps + 1):
            if schedule is not None:
                schedule.gate(step)
            p = c.ask()
            ev = plant.evaluate([p["gains"][k] for k in names], p["t"])
            c.tell(p["proposal_id"], ev.cost)
            if schedule is not None:
                schedule.completed(step)


def test_kill_loop_on_a_cartpole_session_loses_and_duplicates_nothing(tmp_path):
    steps, kills_wanted = (300, 100) if LONG else (80, 12)
    ref = _shipped_cartpole_daemon(tmp_path / "ref").start()
    _cartpole_session(ref, steps)
    assert ref.stop() == 0

    d = _shipped_cartpole_daemon(tmp_path / "kill").start()
    rng = random.Random(5)
    log: list[dict] = []
    with KillSchedule(d, rng.sample(range(2, steps - 1), kills_wanted), rng) as schedule:
        _cartpole_session(d, steps, schedule, log)
    d.wait_ready()
    assert d.stop() == 0
    assert schedule.kills == kills_wanted
    counts = check_history(log, d.state / "plants" / "cartpole")
    assert counts["acknowledged_tells"] == steps
    got, want = measurement_history(d, "cartpole"), measurement_history(ref, "cartpole")
    assert [h[0] for h in got] == list(range(1, steps + 1))
    assert got == want
    assert_bounded_recovery(d, "cartpole", 5, schedule.targets, steps)


def test_adapter_killed_mid_proposal_resumes_the_pending_proposal(tmp_path):
    d = _shipped_cartpole_daemon(tmp_path).start()
    records = tmp_path / "cart.jsonl"
    cmd = [sys.executable, "-m", "plant_adapters.cartpole", "--endpoint", d.endpoint,
           "--until", "12", "--out", str(records)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.startswith("[cartpole] t=5 "):
            break
    proc.send_signal(signal.SIGSTOP)  # freeze it; it may or may not have asked for t = 6 yet
    with DaemonClient(d.endpoint, "cartpole", adapter="cartpole-adapter") as c:
        pending_before = c.status("cartpole")["plants"][0]["pending"] or c.ask()
    proc.kill()  # dies holding the proposal
    proc.wait()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming pending proposal {pending_before['proposal_id']}" in again.stdout
    with DaemonClient(d.endpoint, "cartpole") as c:
        status = c.status("cartpole")["plants"][0]
    assert status["t"] == 13 and status["tells"] == 12
    assert d.stop() == 0


def _mutations(rng: random.Random, n: int):
    valid = [
        {"v": 1, "id": "f", "type": "ping"},
        {"v": 1, "id": "f", "type": "status", "plant": "alpha"},
        {"v": 1, "id": "f", "type": "hello", "plant": "alpha", "adapter": "fuzz"},
        {"v": 1, "id": "f", "type": "tell", "plant": "alpha", "proposal_id": "never", "measurement": 1.0},
        {"v": 1, "id": "f", "type": "ask", "plant": "beta", "adapter": "fuzz"},
    ]
    junk = [None, True, -1, 2**63, 1e308, float("nan"), "x" * 300, b"\x00\xff", [1, [2, [3]]],
            {"a": {"b": {"c": 1}}}, "alpha", "", {}, []]
    keys = ["v", "id", "type", "plant", "proposal_id", "measurement", "failed", "metadata", "adapter"]
    for i in range(n):
        kind = i % 4
        if kind == 0:
            yield [rng.randbytes(rng.randint(1, 300))]
        elif kind == 1:
            msg = dict(rng.choice(valid))
            for _ in range(rng.randint(1, 3)):
                msg[rng.choice(keys)] = rng.choice(junk)
            yield [msgpack.packb(msg, use_bin_type=True)]
        elif kind == 2:
            blob = bytearray(msgpack.packb(rng.choice(valid)))
            for _ in range(rng.randint(1, 6)):
                blob[rng.randrange(len(blob))] = rng.randrange(256)
            yield [bytes(blob)]
        else:
            yield [rng.randbytes(rng.randint(0, 20)) for _ in range(rng.randint(2, 4))]


def test_fuzzed_frames_from_another_process_keep_memory_bounded(daemon):
    n = 100_000 if LONG else 20_000
    with daemon.client("alpha", adapter="owner") as a, daemon.client("beta", adapter="owner") as c:
        a.ask()  # both plants claimed: a fuzzed ask or tell from anyone else must be refused
        p = c.ask()
        before = c.status()["plants"]
    rss_before = _rss_kb(daemon.proc.pid)
    peer = RawPeer(daemon.endpoint)
    answered = 0
    for frames in _mutations(random.Random(11), n):
        reply = peer.send_frames(frames, timeout=5.0)
        assert reply is not None
        answered += 1
        assert reply["ok"] is False or reply["type"] in ("ping", "status", "hello")
    peer.close()
    rss_after = _rss_kb(daemon.proc.pid)
    print(f"fuzz: {n} frames, daemon RSS {rss_before / 1024:.1f} MB -> {rss_after / 1024:.1f} MB")
    assert answered == n
    assert rss_after - rss_before < 30 * 1024, (rss_before, rss_after)
    with daemon.client("beta", adapter="owner") as c:
        after = c.status()["plants"]
        assert c.ask()["proposal_id"] == p["proposal_id"]
    keys = ("plant", "t", "dataset_size", "resets", "tells", "pending")
    assert [{k: q[k] for k in keys} for q in after] == [{k: q[k] for k in keys} for q in before]


def _tvbod(*args):
    return subprocess.run([sys.executable, "-m", "tvbod", *args], capture_output=True, text=True,
                          timeout=300)


def _history_is_complete(d: Daemon, tmp_path: Path, steps: int) -> None:
    """`tvbod export` has every step 1..steps once and `tvbod replay` verifies them all."""
    import csv

    plant_dir = d.state / "plants" / "alpha"
    out = _tvbod("export", str(plant_dir), "--format", "csv", "--out", str(tmp_path / "a.csv"))
    assert out.returncode == 0, out.stderr
    with open(tmp_path / "a.csv") as f:
        assert [int(row["t"]) for row in csv.DictReader(f)] == list(range(1, steps + 1))
    out = _tvbod("replay", str(plant_dir))
    assert out.returncode == 0 and out.stdout.startswith(f"verified: {steps} steps"), \
        out.stdout + out.stderr


@pytest.mark.parametrize("fault", ["enospc:events", "eio:events"])
def test_tells_acknowledged_while_the_event_file_fails_are_in_the_history_after_a_restart(
        tmp_path, fault):
    """The events file refuses every write and fsync while tells are acknowledged (the journal
    works); checkpoints falling due meanwhile are refused, so the journal keeps the records. A
    SIGKILL loses the lines kept in memory; the restart re-emits them from the journal."""
    fault_file = tmp_path / "fault"
    d = Daemon(tmp_path / "d", checkpoint_every=4, env={"TVBOD_FAULT_FILE": str(fault_file)})
    d.start()
    drive(d, 6)
    fault_file.write_text(fault)
    drive(d, 5)  # steps 7-11: every tell acknowledged, no line written
    d.kill()
    fault_file.unlink()  # space returns
    d.start()
    drive(d, 5)
    assert d.stop() == 0
    refused = [e for e in d.log_events() if e.get("event") == "storage_error"
               and e.get("what") == "event log sync"]
    assert refused, "the checkpoints that fell due during the fault were refused"
    _history_is_complete(d, tmp_path, 16)


@pytest.mark.parametrize("fault", ["enospc:events", "eio:events"])
def test_event_lines_refused_while_running_are_written_in_order_once_the_disk_works(
        tmp_path, fault):
    fault_file = tmp_path / "fault"
    d = Daemon(tmp_path / "d", checkpoint_every=4, env={"TVBOD_FAULT_FILE": str(fault_file)})
    d.start()
    drive(d, 4)
    fault_file.write_text(fault)
    drive(d, 4)
    fault_file.unlink()
    drive(d, 4)
    assert d.stop() == 0
    steps = [e["t"] for e in d.events() if e["event"] == "measurement"]
    assert steps == list(range(1, 13)), "each line once, in order, no restart needed"
    _history_is_complete(d, tmp_path, 12)


def test_a_reload_while_the_event_file_fails_keeps_the_daemon_and_the_history(tmp_path):
    """SIGHUP with a changed plant file checkpoints the plant; with the disk refusing the event
    file that checkpoint is refused, reported, and retried later: the daemon stays up."""
    import signal
    import time

    fault_file = tmp_path / "fault"
    d = Daemon(tmp_path / "d", checkpoint_every=4, env={"TVBOD_FAULT_FILE": str(fault_file)})
    d.start()
    drive(d, 3)
    fault_file.write_text("enospc:events")
    plant = d.root / "plants" / "alpha.yaml"
    plant.write_text(plant.read_text().replace("seed: 1", "seed: 2"))
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while not any(e.get("event") == "config_reloaded" and "plant" not in e
                  for e in d.log_events()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.proc.poll() is None, d.log.read_text()[-2000:]
    drive(d, 3)
    fault_file.unlink()
    drive(d, 3)
    assert d.stop() == 0
    _history_is_complete(d, tmp_path, 9)
