"""Power cuts, enumerated: every disk image the crash model (tests/support/crash_model.py,
docs/reliability.md) allows at every point of a recorded 50-step session recovers with every
acknowledged tell exactly once, the uninterrupted run's next proposal, and a verifying replay.

The session has a reset (the objective jumps at t = 15), ten checkpoint rotations, and a process
crash at a journal fsync followed by a restart (the retried tell is answered from the rebuilt
reply cache). Default: all prefixes, every directory-operation subset, each file's tears at its
write boundaries plus a few random bytes; TVBOD_LONG_TESTS=1 tears the journal at every byte
and the event file at every line and 32 random bytes.

Storage faults, enumerated: ENOSPC and EIO at every write and fsync site (journal, checkpoint,
event log, the plant directory's fsync), starting after each acknowledged request of the session
(every 20th in CI, every one with TVBOD_LONG_TESTS=1), lasting three calls at the site; the
session goes on, and afterwards nothing acknowledged is lost and no history has a silent gap.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import errno

import pytest
from crash_model import SITES, Fault, FileSystem, images
from crash_session import (
    ImageChecker, acked_rids, fault_problems, first_call_after, record_session,
)

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


def _fault_plan(reference):
    """`(tried, runs)`: every (site, acknowledged requests before the fault, errno) tried, and
    the distinct runs among them: faults that first refuse the same call at a site are the same
    run (a faulty session follows the fault-free one call for call up to its fault)."""
    acks = sum(1 for op, f in reference.trace if op == "mark" and f["ok"])
    records = range(0, acks + 1, 1 if LONG else 20)
    tried = [(site, k, e) for site in SITES for k in records for e in (errno.ENOSPC, errno.EIO)]
    runs: dict[tuple, tuple] = {}
    for site, k, e in tried:
        call = first_call_after(reference, site, k)
        if call is not None:
            runs.setdefault((site, call, e), (site, k, e))
    return tried, list(runs.values())


def test_enospc_and_eio_at_every_write_and_fsync_site_lose_nothing_and_leave_no_gap(
        session, tmp_path, workdir):
    start = time.monotonic()
    reference = record_session(workdir / "reference", STEPS, CHECKPOINT_EVERY, crash_at_step=None)
    tried, runs = _fault_plan(reference)
    memo, violations, refused, cli_sites = ImageChecker(reference, workdir), [], 0, set()
    for n, (site, k, e) in enumerate(runs):
        fault = Fault(site, k, e)
        s = record_session(workdir / f"run{n}", STEPS, CHECKPOINT_EVERY, crash_at_step=None,
                           fault=fault)
        # A fault near the end may strike fewer than its calls: the session stopped first.
        assert fault.failed >= 1, f"{site} after {k}: the fault never struck"
        refused += s.refused
        cli = LONG or (site, e) not in cli_sites  # the real command once per site and errno
        cli_sites.add((site, e))
        for problem in fault_problems(s, STEPS, workdir, memo, replay_cli=cli):
            violations.append(f"{'/'.join(site)} {errno.errorcode[e]} after {k} acks: {problem}")
        shutil.rmtree(workdir / f"run{n}")
    records = len({k for _, k, _ in tried})
    print(f"\nstorage faults: {len(SITES)} sites x {records} records x 2 errnos = {len(tried)} "
          f"tried, {len(runs)} distinct runs ({refused} requests answered storage_unavailable "
          f"and retried), {len(violations)} violations (acknowledged tells lost, silent gaps, "
          f"replays not verified), {time.monotonic() - start:.1f} s")
    assert violations == [], "\n".join(violations[:20])


def test_a_silently_dropped_event_line_is_caught_as_a_gap(tmp_path, workdir):
    """The checks can fail: a disk that drops an event line without an error (no storage_error,
    nothing kept) leaves a hole the next checkpoint makes permanent, and it is reported."""
    writes = []

    def skip(op, path):  # the 8th to 11th line: a few steps' measurement lines
        if op == "write" and path.endswith("/events.jsonl"):
            writes.append(path)
            return 8 <= len(writes) <= 11
        return False

    bad = record_session(tmp_path / "s", 12, CHECKPOINT_EVERY, crash_at_step=None, skip=skip)
    problems = fault_problems(bad, 12, workdir)
    assert any("missing from events.jsonl" in p for p in problems), problems
