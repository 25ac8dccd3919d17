"""`tvbod export` (one row per step, read-only, pandas-readable) and `tvbod import` (the rows
seed a fresh state directory and reproduce the dataset); bad input: one line, exit 2, nothing
written."""

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from daemon_harness import Daemon, objective, offline_site

COLUMNS = ["t", "proposal_id", "kp", "ki", "measurement", "failed", "psi", "threshold", "reset",
           "dataset_size", "wall_time"]
SAME = [c for c in COLUMNS if c not in ("proposal_id", "wall_time")]


def tvbod(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvbod", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def _digest(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """A plant with 24 steps (a failed one, a reset after the jump at t = 15), daemon running."""
    d = Daemon(tmp_path_factory.mktemp("export")).start()
    c = d.client("alpha")
    for _ in range(24):
        p = c.ask()
        failed = p["t"] == 7
        c.tell(p["proposal_id"], None if failed else objective(p["gains"], p["t"]), failed=failed)
    # The last tell's model job may still run, and a checkpoint fall due when it ends; a request
    # to the plant is answered only after that checkpoint, so from here the daemon writes nothing.
    c.hello()
    yield d
    d.stop()


def test_export_is_one_row_per_step_readable_by_pandas_and_touches_nothing(session, tmp_path):
    pandas = pytest.importorskip("pandas")
    plant = session.state / "plants" / "alpha"
    before = _digest(plant)
    csv_out, jsonl_out = tmp_path / "a.csv", tmp_path / "a.jsonl"
    assert tvbod("export", plant, "--out", csv_out).returncode == 0
    assert tvbod("export", plant, "--format", "jsonl", "--out", jsonl_out).returncode == 0
    stdout = tvbod("export", plant).stdout
    assert _digest(plant) == before  # the live state directory is only read
    frame = pandas.read_csv(csv_out)
    lines = pandas.read_json(jsonl_out, lines=True)
    assert list(frame.columns) == COLUMNS and list(lines.columns) == COLUMNS
    assert stdout == csv_out.read_text()
    assert list(frame["t"]) == list(range(1, 25)) and list(frame["dataset_size"])[:3] == [1, 2, 3]
    assert frame["failed"].tolist() == [t == 7 for t in range(1, 25)]
    assert frame["reset"].dtype == bool and frame["reset"].any()
    events = {e["proposal_id"]: e for e in session.events() if e["event"] == "measurement"}
    for row in json.loads("[" + ",".join(jsonl_out.read_text().splitlines()) + "]"):
        e = events[row["proposal_id"]]
        assert (row["kp"], row["ki"]) == (e["gains"]["kp"], e["gains"]["ki"])
        assert row["measurement"] == e["measurement"] and row["psi"] == e["psi"]
    # (pandas' JSON reader parses floats to about 15 digits unless told precise_float=True)
    cols = ["measurement", "psi", "threshold"]
    assert np.allclose(frame[cols].to_numpy(), lines[cols].to_numpy(), rtol=1e-12, atol=0)


def test_export_then_import_into_a_fresh_state_reproduces_the_dataset(session, tmp_path):
    pandas = pytest.importorskip("pandas")
    exported = tmp_path / "alpha.csv"
    assert tvbod("export", session.state / "plants" / "alpha", "--out", exported).returncode == 0
    config = offline_site(tmp_path / "site")
    r = tvbod("import", "alpha", exported, "--config", config)
    assert r.returncode == 0, r.stderr
    assert "24 observations" in r.stdout and "t=1..24" in r.stdout
    again = tmp_path / "again.csv"
    assert tvbod("export", tmp_path / "site/state/plants/alpha", "--out", again).returncode == 0
    a, b = pandas.read_csv(exported), pandas.read_csv(again)
    # failed rows come back as plain observations of the substituted value
    assert b[[c for c in SAME if c != "failed"]].equals(a[[c for c in SAME if c != "failed"]])
    assert not b["failed"].any()
    assert (b["proposal_id"] == [f"alpha:{t}.observed" for t in range(1, 25)]).all()
    # the seeded plant is a normal plant: a daemon restores it and goes on at t = 25
    d = Daemon(tmp_path / "site2")  # the same plant file; the imported state copied in
    shutil.copytree(tmp_path / "site/state", d.state)
    d.start()
    try:
        assert d.client("alpha").hello()["t"] == 25
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize(("content", "message"), [
    ("", "missing column(s) kp, ki, measurement"),
    ("kp,measurement\n1.0,2.0\n", "missing column(s) ki"),
    ("kp,ki,measurement\n", "no rows after the header"),
    ("kp,ki,measurement\n1.0,0.0,abc\n", "line 2, column measurement: 'abc' is not a number"),
    ("kp,ki,measurement\n1.0,0.0,1\n1.0,nan,1\n", "line 3, column ki: 'nan' is not a finite"),
    ("kp,ki,measurement\n1.0,0.0,inf\n", "'inf' is not a finite number"),
    ("kp,ki,measurement\n5.0,0.0,1.0\n", "line 2: point [5.0, 0.0] is outside the box"),
    ("kp,ki,measurement\n1.0,0.0\n", "line 2: 3 fields expected"),
    ("t,kp,ki,measurement\n2,1.0,0.0,1\n1,1.0,0.0,1\n", "rows must be in step order"),
    ("kp,ki,measurement,failed\n1.0,0.0,1,maybe\n", "'maybe' is not true or false"),
])
def test_bad_csv_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, content, message):
    from tvbod.commands import main  # in-process: the same command line, without an interpreter start

    config = offline_site(tmp_path / "site")
    (tmp_path / "in.csv").write_text(content)
    assert main(["import", "alpha", str(tmp_path / "in.csv"), "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "site" / "state").exists()


def test_import_refuses_an_unknown_plant_a_missing_file_and_a_running_daemon(session, tmp_path):
    config = offline_site(tmp_path / "site")
    (tmp_path / "in.csv").write_text("kp,ki,measurement\n1.0,0.0,1.0\n")
    unknown = tvbod("import", "nope", tmp_path / "in.csv", "--config", config)
    assert unknown.returncode == 2 and "no plant named 'nope'" in unknown.stderr
    missing = tvbod("import", "alpha", tmp_path / "none.csv", "--config", config)
    assert missing.returncode == 2 and "cannot read the CSV" in missing.stderr
    assert not (tmp_path / "site" / "state").exists()
    before = _digest(session.state / "plants" / "alpha")
    live = tvbod("import", "alpha", tmp_path / "in.csv", "--config", session.root / "tvbod.yaml")
    assert live.returncode == 2 and "another tvbod daemon" in live.stderr
    assert _digest(session.state / "plants" / "alpha") == before
    for r in (unknown, missing, live):
        assert r.stderr.count("\n") == 1


def test_export_of_an_empty_or_missing_plant_is_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "out.csv"
    r = tvbod("export", tmp_path / "nope", "--out", out)
    assert r.returncode == 2 and "not found" in r.stderr and not out.exists()
    d = Daemon(tmp_path / "d").start()  # a plant that has never been told
    d.stop()
    r = tvbod("export", d.state / "plants" / "alpha", "--out", out)
    assert r.returncode == 2 and "no recorded measurements" in r.stderr and not out.exists()
    assert r.stderr.count("\n") == 1
