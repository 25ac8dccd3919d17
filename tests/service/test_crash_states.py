"""Power cuts, enumerated: every disk image the crash model (tests/support/crash_model.py,
docs/reliability.md) allows at every point of a recorded 50-step session recovers with every
acknowledged tell exactly once, the uninterrupted run's next proposal, and a verifying replay.

The session has a reset (the objective jumps at t = 15), ten checkpoint rotations, and a process
crash at a journal fsync followed by a restart (the retried tell is answered from the rebuilt
reply cache). Default: all prefixes, every directory-operation subset, each file's tears at its
write boundaries plus a few random bytes; TVBOD_LONG_TESTS=1 tears the journal at every byte
and the event file at every line and 32 random bytes.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from crash_model import FileSystem, images
from crash_session import ImageChecker, acked_rids, record_session

LONG = os.environ.get("TVBOD_LONG_TESTS") == "1"
STEPS = 50
CHECKPOINT_EVERY = 10  # records (a proposal and a tell per step): a checkpoint every 5 steps


def _prefix_images(session, rng):
    """`(k, op, fields, replies sent, image)` for every image of every trace prefix."""
    fs = FileSystem()
    acked: set[str] = set()
    for k, (op, fields) in enumerate(session.trace, start=1):
        fs.apply(op, fields)
        if op == "mark" and fields["ok"]:
            acked.add(fields["id"])
        for image in images(fs, rng):
            yield k, op, fields, acked, image


def enumerate_states(session, workdir, seed, stop_at: str | None = None):
    """Check every distinct image once, against the most replies sent at any prefix that can
    leave it (the strictest demand). Returns (states, violations, images generated, checker)."""
    rng = lambda: None if LONG else random.Random(seed)  # noqa: E731 - same sample both passes
    strictest: dict[str, int] = {}
    generated = 0
    for _, _, _, acked, image in _prefix_images(session, rng()):
        generated += 1
        digest = image.digest()
        strictest[digest] = max(strictest.get(digest, 0), len(acked))
    checker = ImageChecker(session, workdir)
    violations, checked = [], set()
    for k, op, fields, acked, image in _prefix_images(session, rng()):
        digest = image.digest()
        if digest in checked or strictest[digest] != len(acked):
            continue
        checked.add(digest)
        for problem in checker.check(image, acked):
            violations.append(f"after op {k} ({op} {fields.get('path', '')}): {problem}")
            if stop_at is not None and stop_at in problem:
                return len(checked), violations, generated, checker
    return len(checked), violations, generated, checker


@pytest.fixture
def workdir(tmp_path):
    """Where images are written and recovered: a tmpfs when there is one (thousands of small
    directories; the disk's speed is not what is tested), else the test's temporary directory."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="tvbod-crash-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash-session")
    return record_session(root, STEPS, CHECKPOINT_EVERY, crash_at_step=33)


def test_session_has_a_reset_rotations_and_a_crash_restart(session):
    ops = [op for op, _ in session.trace]
    renames = [f["dst"] for op, f in session.trace if op == "rename"]
    assert renames.count("state/plants/alpha/checkpoint.prev") >= 2  # checkpoints rotated
    assert any(p["t"] > 15 for p in session.proposals.values())
    replies = [e["reply"] for e in session.log if e["op"] == "reply" and "reset" in e["reply"]]
    assert any(r["reset"] for r in replies), "the jump at t = 15 triggers a reset"
    assert any(r.get("duplicate") for r in replies), "the crashed tell was answered from the cache"
    assert len(session.tells) == STEPS and ops.count("mark") >= 2 * STEPS


def test_every_power_cut_state_recovers_every_acknowledged_tell_exactly_once(session, workdir):
    start = time.monotonic()
    states, violations, generated, checker = enumerate_states(session, workdir, seed=14)
    seconds = time.monotonic() - start
    print(f"\ncrash states: {len(session.trace)} trace prefixes, {generated} images generated, "
          f"{states} distinct checked, {checker.replays} distinct replays verified, "
          f"{len(violations)} violations, {seconds:.1f} s")
    assert violations == [], "\n".join(violations[:20])
    assert states >= 2000


@pytest.mark.parametrize("broken", ["journal fsync skipped (reply before fsync)",
                                    "directory fsyncs skipped (rename without a directory fsync)"])
def test_a_broken_write_order_is_caught(tmp_path, workdir, broken):
    """The same enumeration over a session recorded with a write left out, as buggy code would."""
    if broken.startswith("journal"):
        skip = lambda op, path: op == "fsync" and path.endswith("/journal")  # noqa: E731
    else:
        skip = lambda op, path: op == "fsync_dir"  # noqa: E731
    bad = record_session(tmp_path / "s", 12, CHECKPOINT_EVERY, crash_at_step=None, skip=skip)
    _, violations, _, _ = enumerate_states(bad, workdir, seed=1, stop_at="acknowledged tells lost")
    assert any("acknowledged tells lost" in v for v in violations), f"{broken}: {violations[:3]}"


def test_tvbod_replay_cli_verifies_crash_images(session, tmp_path):
    """The real `tvbod replay` on images cut at three points of the session (after recovery)."""
    checker = ImageChecker(session, tmp_path)
    fs = FileSystem()
    marks = [k for k, (op, _) in enumerate(session.trace, 1) if op == "mark"]
    cuts = {marks[len(marks) // 4], marks[len(marks) // 2], marks[-3]}
    for k, (op, fields) in enumerate(session.trace, start=1):
        fs.apply(op, fields)
        if k not in cuts:
            continue
        image = next(iter(images(fs, random.Random(k))))  # the nothing-unsynced-survived image
        assert checker.check(image, acked_rids(session.trace, k)) == []
        plant_dir = tmp_path / "image" / "state" / "plants" / "alpha"
        out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(plant_dir)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith("verified: ")
