"""A daemon that runs for a year: crashes that come more often than checkpoints still compact,
and events.jsonl is rotated into numbered segments that replay and inspect read in order."""

import json
import os
import subprocess
import sys

from daemon_harness import Daemon, objective

from tvbod.service.event_files import read_history, rotated_segments

#: Lifetimes of the crash loop (the issue's 50 with TVBOD_LONG_TESTS=1; each costs a daemon start).
LIFETIMES = 50 if os.environ.get("TVBOD_LONG_TESTS") == "1" else 8
STEPS_PER_LIFE = 3  # 6 journal records: fewer than checkpoint_every
CHECKPOINT_EVERY = 20


def _steps(d, n):
    with d.client() as c:
        for _ in range(n):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))


def _tvbod(*args):
    return subprocess.run([sys.executable, "-m", "tvbod", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_a_daemon_killed_every_few_records_still_compacts_and_restarts_in_flat_time(tmp_path):
    d = Daemon(tmp_path, checkpoint_every=CHECKPOINT_EVERY)
    journal = d.state / "plants" / "alpha" / "journal"
    journal_bytes = []
    for _ in range(LIFETIMES):
        d.start()
        _steps(d, STEPS_PER_LIFE)
        d.kill()
        journal_bytes.append(journal.stat().st_size)
    d.start()
    assert d.stop() == 0

    events = d.events()
    restored = [e for e in events if e["event"] == "plant_restored"]
    assert len(restored) == LIFETIMES + 1
    replayed = [e["replayed"] for e in restored]
    # Replayed records count toward the next checkpoint: never more than one interval plus one
    # lifetime's records, however many lifetimes (without it: 6, 12, 18, ... growing per start).
    bound = CHECKPOINT_EVERY + 2 * STEPS_PER_LIFE
    assert max(replayed) <= bound, replayed
    assert max(replayed[LIFETIMES // 2:]) <= bound  # flat: the late starts replay no more
    assert max(journal_bytes) <= bound * 400, journal_bytes  # a record is ~250 bytes
    steps = LIFETIMES * STEPS_PER_LIFE
    periodic = [e for e in events if e["event"] == "checkpoint_written"
                and e["reason"] in ("periodic", "recovery")]
    assert len(periodic) >= 2 * steps // bound
    # Each measurement line is written once: the replayed ones were already in the file.
    measurements = [e for e in events if e["event"] == "measurement"]
    assert len(measurements) == steps and sum(e["relogged"] for e in restored) == 0
    out = _tvbod("replay", d.state / "plants" / "alpha")
    assert out.returncode == 0 and f"verified: {steps} steps" in out.stdout, out.stdout + out.stderr


def _rotating_daemon(root, keep):
    return Daemon(root, checkpoint_every=4, extra=f"""\
        events_segment_bytes: 4096
        events_keep_segments: {keep}
        """)


def test_events_rotate_into_ordered_segments_that_replay_and_inspect_read(tmp_path):
    d = _rotating_daemon(tmp_path, keep=0).start()
    _steps(d, 30)
    assert d.stop() == 0
    plant = d.state / "plants" / "alpha"
    numbers = [n for n, _ in rotated_segments(plant)]
    assert len(numbers) >= 3 and numbers == list(range(1, len(numbers) + 1))
    for n in numbers:  # each closed segment ends at a checkpoint, and it is kept as a link
        assert (plant / f"events.{n:06d}.end").exists()
    steps = [e["t"] for e in read_history(plant) if e["event"] == "measurement"]
    assert steps == list(range(1, 31))  # segments first, in order, then the active file
    out = _tvbod("replay", plant)
    assert out.returncode == 0 and "verified: 30 steps" in out.stdout, out.stdout + out.stderr
    out = _tvbod("inspect", plant, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)[0]["events"]
    assert summary["measurements"] == 30
    assert summary["files"] == [f"events.{n:06d}.jsonl" for n in numbers] + ["events.jsonl"]


def test_retention_keeps_the_newest_segments_and_replay_verifies_from_the_oldest_kept(tmp_path):
    d = _rotating_daemon(tmp_path, keep=2).start()
    _steps(d, 40)
    assert d.stop() == 0
    plant = d.state / "plants" / "alpha"
    segments = rotated_segments(plant)
    assert len(segments) == 2 and segments[0][0] > 1
    ends = sorted(p.name for p in plant.glob("events.*.end"))
    assert ends == [f"events.{n:06d}.end" for n in range(segments[0][0] - 1, segments[-1][0] + 1)]
    assert not (plant / "events.000001.jsonl").exists()
    removed = [r for e in read_history(plant) if e["event"] == "events_rotated" for r in e["removed"]]
    assert "events.000001.jsonl" in removed or segments[0][0] > 2
    kept = [e["t"] for e in read_history(plant) if e["event"] == "measurement"]
    assert kept == list(range(kept[0], 41)) and kept[0] > 1  # the newest steps, in order
    out = _tvbod("replay", plant)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"verified: {len(kept)} steps" in out.stdout
