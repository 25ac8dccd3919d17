"""The client-history checker (tests/support/history.py) passes a clean session and fails each
kind of history it exists to catch: a lost acknowledged tell, a duplicate, a step going back."""

import json
import shutil

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
