"""The client-history checker (tests/support/history.py) passes a clean session and fails each
kind of history it exists to catch: a lost acknowledged tell, a duplicate, a step going back;
and `tvbod replay` / `tvbod export` refuse a history with a step missing, naming it."""

import json
import shutil
import subprocess
import sys

import pytest
from daemon_harness import Daemon, drive
from history import check_history


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("history")).start()
    log: list[dict] = []
    drive(d, 8, log=log)
    assert d.stop() == 0
    return d.state / "plants" / "alpha", log


def _tampered(plant_dir, tmp_path, change):
    """A copy of the plant's directory whose event history `change` rewrote."""
    copy = tmp_path / "plants" / "alpha"
    shutil.copytree(plant_dir, copy)
    events = [json.loads(x) for x in (copy / "events.jsonl").read_text().splitlines()]
    (copy / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in change(events)))
    return copy


def test_a_clean_session_passes(clean):
    plant_dir, log = clean
    counts = check_history(log, plant_dir, tells_counted=8)
    assert counts == {"requests": 16, "acknowledged_tells": 8, "history": 8}


def test_a_lost_acknowledged_tell_fails(clean, tmp_path):
    plant_dir, log = clean
    def lose_last(ev):
        return [e for e in ev if not (e["event"] == "measurement" and e["t"] == 8)]

    with pytest.raises(AssertionError, match="missing"):
        check_history(log, _tampered(plant_dir, tmp_path, lose_last))


def test_a_duplicated_tell_fails(clean, tmp_path):
    plant_dir, log = clean

    def twice(ev):
        m = next(e for e in ev if e["event"] == "measurement" and e["t"] == 3)
        return ev + [{**m, "proposal_id": "alpha:9", "t": 9}]

    with pytest.raises(AssertionError, match="never acknowledged"):
        check_history(log, _tampered(plant_dir, tmp_path, twice))
    with pytest.raises(AssertionError):
        check_history(log, plant_dir, tells_counted=9)  # the daemon counted one tell twice


def test_a_step_going_back_fails(clean):
    plant_dir, log = clean
    replies = [e for e in log if e["op"] == "reply" and "dataset_size" in e["reply"]]
    swapped = [dict(e) for e in log]
    i, j = swapped.index(replies[2]), swapped.index(replies[5])
    swapped[i], swapped[j] = swapped[j], swapped[i]
    with pytest.raises(AssertionError):
        check_history(swapped, plant_dir)


def _tvbod(*args):
    return subprocess.run([sys.executable, "-m", "tvbod", *args], capture_output=True, text=True,
                          timeout=120)


def _without_steps(steps):
    return lambda ev: [e for e in ev if not (e["event"] in ("measurement", "reset")
                                             and e["t"] in steps)]


@pytest.mark.parametrize("steps, message", [
    ({3, 4}, "history jumps from step 2 to 5: steps 3-4 are missing from events.jsonl"),
    ({1}, "history starts at step 2, not 1: step 1 is missing from events.jsonl"),
    ({7, 8}, "history ends at step 6 but the checkpoint holds steps up to 8: steps 7-8 are "
             "missing from events.jsonl"),
])
def test_replay_and_export_refuse_a_history_with_missing_steps_and_name_them(
        clean, tmp_path, steps, message):
    plant_dir, _ = clean
    holed = _tampered(plant_dir, tmp_path, _without_steps(steps))
    replay = _tvbod("replay", str(holed))
    assert replay.returncode == 1 and message in replay.stderr, replay.stdout + replay.stderr
    out = tmp_path / "out.csv"
    export = _tvbod("export", str(holed), "--out", str(out))
    assert export.returncode == 1 and message in export.stderr, export.stderr
    assert not out.exists()


def test_replayed_duplicates_of_a_step_are_not_a_gap(clean, tmp_path):
    """A restart re-emits journaled tells with `replayed: true`: the same proposal twice."""
    plant_dir, _ = clean

    def relogged(ev):
        m = next(e for e in ev if e["event"] == "measurement" and e["t"] == 5)
        return ev + [{**m, "replayed": True}]

    copy = _tampered(plant_dir, tmp_path, relogged)
    out = _tvbod("replay", str(copy))
    assert out.returncode == 0 and out.stdout.startswith("verified: 8 steps"), out.stderr
    export = _tvbod("export", str(copy), "--format", "jsonl")
    assert export.returncode == 0
    assert [json.loads(x)["t"] for x in export.stdout.splitlines()] == list(range(1, 9))


def test_a_step_recorded_under_two_proposal_ids_is_refused(clean, tmp_path):
    plant_dir, _ = clean

    def twice(ev):
        m = next(e for e in ev if e["event"] == "measurement" and e["t"] == 5)
        return ev + [{**m, "proposal_id": "alpha:5.1"}]

    out = _tvbod("export", str(_tampered(plant_dir, tmp_path, twice)))
    assert out.returncode == 1
    assert "step 5 is recorded twice (proposal ids alpha:5 and alpha:5.1)" in out.stderr
