"""Model work off the reply path (tvbod/service/workers.py), over a real daemon process.

A fault file holds one plant's model job (`hold-prepare:NAME`, tvbod/service/faults.py) as an
endless refit would, so the tests prove by order, not by timing, that the held plant's tell is
acknowledged, that its next ask waits for its job alone, and that every other plant is served."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import msgpack
import pytest
from daemon_harness import Daemon, RawPeer, objective

from tvbod.service.store import CheckpointStore

MAP = """\
  hyperparameters:
    lengthscales: map
    prior: {shape: 3.0, rate: 6.0}
    bounds: [0.05, 5.0]
    refit_every: 1
    restarts: 2
    maxiter: 30
"""
PLANTS = {"alpha": {"extra": MAP}, "beta": {"seed": 2}}


def _msg(kind: str, plant: str | None, rid: str, **fields) -> dict:
    return {"v": 1, "type": kind, "id": rid, **({"plant": plant} if plant else {}), **fields}


def _steps(c, n: int) -> list[tuple]:
    out = []
    for _ in range(n):
        p = c.ask()
        out.append((p["proposal_id"], tuple(p["gains"].values())))
        c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    return out


def _reference(root, steps: int) -> list[tuple]:
    """alpha's proposals over `steps` steps of a daemon that never held a job."""
    d = Daemon(root, plants=PLANTS).start()
    with d.client("alpha") as c:
        proposals = _steps(c, steps)
        proposals.append((c.ask()["proposal_id"], tuple(c.ask()["gains"].values())))
    assert d.stop() == 0
    return proposals


def _hold(fault, plant: str | None) -> None:
    fault.write_text(f"hold-prepare:{plant}" if plant else "")


@contextmanager
def _daemon_with_a_fault_file(tmp_path, kind: str = "thread", **daemon_args):
    """`(daemon, fault file, raw peer)`: a daemon whose plants' jobs the fault file can hold,
    run by model workers of `kind`."""
    fault = tmp_path / "fault"
    fault.write_text("")
    d = Daemon(tmp_path / "d", plants=PLANTS, env={"TVBOD_FAULT_FILE": str(fault)},
               extra=f"model_worker_kind: {kind}\n", **daemon_args).start()
    peer = RawPeer(d.endpoint)
    try:
        yield d, fault, peer
    finally:
        peer.close()
        assert d.stop() == 0


def _send(peer, kind: str, plant: str | None, rid: str) -> None:
    extra = {"adapter": "tvbod-client"} if kind in ("ask", "hello") else {}
    peer.sock.send_multipart([b"", msgpack.packb(_msg(kind, plant, rid, **extra))])


def _reply(peer) -> dict:
    assert peer.sock.poll(60_000)
    return msgpack.unpackb(peer.sock.recv_multipart()[-1])


KINDS = pytest.mark.parametrize("kind", ["thread", "process"])


@KINDS
def test_a_held_refit_delays_only_its_own_plant(tmp_path, kind):
    # With process workers, also: the strategy pickled to a worker and back computes exactly
    # what the thread-run reference computed.
    expected = _reference(tmp_path / "ref", 6)
    with _daemon_with_a_fault_file(tmp_path, kind) as (d, fault, peer):
        with d.client("alpha") as a, d.client("beta") as b:
            got = _steps(a, 5)
            p = a.ask()
            got.append((p["proposal_id"], tuple(p["gains"].values())))
            _hold(fault, "alpha")
            told = a.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            assert told["t"] == 6  # acknowledged: durable and decided, the refit still to come
            _send(peer, "ask", "alpha", "held-ask")
            assert peer.sock.poll(500) == 0  # waits for alpha's job, which is held
            beta = _steps(b, 4)  # ... while beta is served: ask, tell, refit, ask again
            assert [pid for pid, _ in beta] == [f"beta:{t}" for t in range(1, 5)]
            assert b.status("beta")["plants"][0]["t"] == 5
            assert peer.sock.poll(0) == 0
            _hold(fault, None)
            reply = _reply(peer)
            assert reply.get("ok") and reply["id"] == "held-ask", reply
            got.append((reply["proposal_id"], tuple(reply["gains"].values())))
    assert got == expected  # the same proposals as a daemon that never waited


@KINDS
def test_a_status_of_all_plants_waits_for_the_plants_busy_when_it_came(tmp_path, kind):
    with _daemon_with_a_fault_file(tmp_path, kind) as (d, fault, peer):
        with d.client("alpha") as a:
            _steps(a, 2)
            p = a.ask()
            _hold(fault, "alpha")
            a.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            _send(peer, "status", None, "s")
            assert peer.sock.poll(500) == 0
            with d.client("beta") as b:
                assert b.ping()["pong"]  # the loop answers others meanwhile
            _hold(fault, None)
            reply = _reply(peer)
    plants = {s["plant"]: s for s in reply["plants"]}
    assert plants["alpha"]["t"] == 4 and plants["alpha"]["best"]["measured_at"] >= 1
    assert set(plants) == {"alpha", "beta"}


@KINDS
def test_sigkill_while_a_refit_runs_loses_nothing_and_resumes_exactly(tmp_path, kind):
    expected = _reference(tmp_path / "ref", 6)
    fault = tmp_path / "fault"
    fault.write_text("")
    d = Daemon(tmp_path / "d", plants=PLANTS, env={"TVBOD_FAULT_FILE": str(fault)},
               extra=f"model_worker_kind: {kind}\n").start()
    with d.client("alpha") as a:
        got = _steps(a, 5)
        p = a.ask()
        got.append((p["proposal_id"], tuple(p["gains"].values())))
        _hold(fault, "alpha")
        assert a.tell(p["proposal_id"], objective(p["gains"], p["t"]))["t"] == 6
    workers = _children(d.proc.pid) if kind == "process" else []
    assert workers or kind == "thread"
    d.kill()  # the acknowledged tell's refit never finished
    deadline = time.monotonic() + 30  # worker processes die with the daemon, even held ones
    while any(_alive(pid) for pid in workers):
        assert time.monotonic() < deadline, [pid for pid in workers if _alive(pid)]
        time.sleep(0.05)
    _hold(fault, None)
    d.start()
    with d.client("alpha") as a:
        p = a.ask()
        got.append((p["proposal_id"], tuple(p["gains"].values())))
    assert got == expected
    assert [e["t"] for e in d.events() if e["event"] == "measurement"
            and not e.get("replayed")] == list(range(1, 7))
    assert d.stop() == 0
    # and the offline replay of the logged data agrees exactly
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_ask_after_observations_has_its_proposal_computed_by_a_worker(tmp_path):
    # An observe prepares no proposal (another observation usually follows); the ask that comes
    # next starts the job that computes it and waits for it, while the loop serves other plants.
    with _daemon_with_a_fault_file(tmp_path) as (d, fault, peer):
        with d.client("alpha") as a:
            for k in range(4):
                gains = {"kp": 0.3 * k, "ki": 0.1 * k}
                assert a.observe(gains, objective(gains, k + 1))["t"] == k + 1
            _hold(fault, "alpha")
            _send(peer, "ask", "alpha", "ask-after-observe")
            assert peer.sock.poll(500) == 0  # held: the proposal is a worker's job
            with d.client("beta") as b:
                assert [pid for pid, _ in _steps(b, 2)] == ["beta:1", "beta:2"]
            _hold(fault, None)
            reply = _reply(peer)
            assert reply.get("ok") and reply["proposal_id"] == "alpha:5", reply


def test_a_checkpoint_due_while_a_job_ran_is_written_before_its_plant_answers_again(tmp_path):
    # A busy plant is not checkpointed (its model is being settled); the checkpoint that fell
    # due meanwhile is written when the job is collected, before the plant's held requests are
    # answered. So a client that hears back from the plant sees that tell checkpointed.
    with _daemon_with_a_fault_file(tmp_path, checkpoint_every=1) as (d, fault, peer):
        checkpoints = CheckpointStore(d.state / "plants" / "alpha")
        with d.client("alpha") as a, d.client("beta") as b:
            _steps(a, 2)
            p = a.ask()
            a.hello()  # answered in a later turn than the ask's, so after the ask's checkpoint
            before = checkpoints.load().journal_seq
            _hold(fault, "alpha")
            a.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            assert b.ping()["pong"]  # a loop turn after the tell's: alpha still busy
            assert checkpoints.load().journal_seq == before  # due, but its job holds the model
            _send(peer, "hello", "alpha", "after-the-job")
            assert peer.sock.poll(500) == 0
            _hold(fault, None)
            reply = _reply(peer)
            assert reply.get("ok") and reply["id"] == "after-the-job", reply
            assert checkpoints.load().journal_seq > before  # the tell is in the checkpoint


def _alive(pid: int) -> bool:
    """True while `pid` runs (not gone, not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_a_killed_worker_process_fails_its_job_not_the_daemon(tmp_path):
    expected = _reference(tmp_path / "ref", 6)
    with _daemon_with_a_fault_file(tmp_path, "process") as (d, fault, peer):
        with d.client("alpha") as a, d.client("beta") as b:
            got = _steps(a, 5)
            p = a.ask()
            got.append((p["proposal_id"], tuple(p["gains"].values())))
            _hold(fault, "alpha")
            a.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            workers = _children(d.proc.pid)
            assert workers  # spawned worker processes (and the spawn's resource tracker)
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            _hold(fault, None)
            _send(peer, "ask", "alpha", "after-the-kill")
            reply = _reply(peer)  # recomputed by a new pool from the plant's own strategy
            assert reply.get("ok") and reply["proposal_id"] == "alpha:7", reply
            got.append((reply["proposal_id"], tuple(reply["gains"].values())))
            assert [pid for pid, _ in _steps(b, 2)] == ["beta:1", "beta:2"]
            deadline = time.monotonic() + 30
            while not any(e["event"] == "internal_error" for e in d.events()):
                assert time.monotonic() < deadline, "the lost job is not reported"
                time.sleep(0.05)
    assert got == expected


def test_resends_of_a_held_request_are_answered_once_and_never_overload_the_plant(tmp_path):
    # A client that retries on silence resends the same id while the job runs (the reference
    # client from a new socket each time): one held request, not one per resend.
    with _daemon_with_a_fault_file(tmp_path) as (d, fault, peer):
        with d.client("alpha") as a:
            _steps(a, 2)
            p = a.ask()
            _hold(fault, "alpha")
            a.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            for _ in range(300):  # more than the 256 a plant may hold
                _send(peer, "ask", "alpha", "resent-ask")
            _send(peer, "ping", None, "after-the-resends")
            pong = _reply(peer)  # read after every resend (one connection keeps its order) ...
            assert pong.get("ok") and pong["id"] == "after-the-resends", pong  # ... none refused
            assert peer.sock.poll(200) == 0
            _hold(fault, None)
            reply = _reply(peer)
            assert reply.get("ok") and reply["proposal_id"] == "alpha:4", reply
            assert peer.sock.poll(1000) == 0  # answered once
