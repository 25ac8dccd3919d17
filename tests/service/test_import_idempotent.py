"""`tvbod import` is idempotent: rows the plant already holds (by `proposal_id`, else by step) are
skipped and counted, `--append` imports them anyway, both export formats import, and a bad file
is one line naming the file, line and column (real exports of a real daemon, real state dirs)."""

import json
import shutil
import subprocess
import sys

import pytest
from daemon_harness import Daemon, objective
from daemon_harness import offline_site as _site


def tvbod(*args):
    return subprocess.run([sys.executable, "-m", "tvbod", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def _measurements(state):
    events = [json.loads(l) for l in (state / "plants/alpha/events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "measurement" and not e.get("replayed")]


def _steps(state) -> list[tuple]:
    """(t, kp, ki, measurement, dataset_size, reset) of every recorded step."""
    return [(e["t"], e["gains"]["kp"], e["gains"]["ki"], e["measurement"], e["dataset_size"],
             e["reset"]) for e in _measurements(state)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 20-step session (a failed step, a reset after the jump at t = 15), stopped, exported as
    CSV and as JSON lines; the stopped daemon's root."""
    root = tmp_path_factory.mktemp("source")
    d = Daemon(root).start()
    c = d.client("alpha")
    for _ in range(20):
        p = c.ask()
        failed = p["t"] == 7
        c.tell(p["proposal_id"], None if failed else objective(p["gains"], p["t"]), failed=failed)
    assert d.stop() == 0
    plant = root / "state/plants/alpha"
    for fmt in ("csv", "jsonl"):
        r = tvbod("export", plant, "--format", fmt, "--out", root / f"alpha.{fmt}")
        assert r.returncode == 0, r.stderr
    return root


def test_importing_the_same_csv_twice_imports_nothing_the_second_time(exported, tmp_path):
    config = _site(tmp_path / "site")
    first = tvbod("import", "alpha", exported / "alpha.csv", "--config", config)
    assert first.returncode == 0, first.stderr
    assert "20 observations into" in first.stdout and "t=1..20" in first.stdout
    assert "; 0 skipped; read alpha.csv as CSV" in first.stdout
    once = _steps(tmp_path / "site/state")
    second = tvbod("import", "alpha", exported / "alpha.csv", "--config", config)
    assert second.returncode == 0, second.stderr
    assert "0 observations into" in second.stdout
    assert "all 20 rows of alpha.csv (CSV) are already in the plant; 20 skipped" in second.stdout
    assert "(by proposal_id 20, by step 0; --append imports them again)" in second.stdout
    assert _steps(tmp_path / "site/state") == once and len(once) == 20  # t = 1..20, |D| as once
    sources = [e["metadata"]["source_proposal_id"] for e in _measurements(tmp_path / "site/state")]
    assert sources == [f"alpha:{t}" for t in range(1, 21)]


def test_a_jsonl_export_imports_like_the_csv_and_then_the_csv_is_held(exported, tmp_path):
    by_csv, by_jsonl = _site(tmp_path / "a"), _site(tmp_path / "b")
    assert tvbod("import", "alpha", exported / "alpha.csv", "--config", by_csv).returncode == 0
    r = tvbod("import", "alpha", exported / "alpha.jsonl", "--config", by_jsonl)
    assert r.returncode == 0, r.stderr
    assert "20 observations into" in r.stdout and "read alpha.jsonl as JSON lines" in r.stdout
    assert _steps(tmp_path / "b/state") == _steps(tmp_path / "a/state")
    assert _steps(tmp_path / "b/state") == _steps(exported / "state")
    again = tvbod("import", "alpha", exported / "alpha.csv", "--config", by_jsonl)
    assert again.returncode == 0 and "all 20 rows" in again.stdout, again.stdout + again.stderr


def test_a_longer_export_imports_only_its_new_rows(exported, tmp_path):
    lines = (exported / "alpha.csv").read_text().splitlines(keepends=True)
    (tmp_path / "head.csv").write_text("".join(lines[:9]))  # the header and steps 1..8
    config = _site(tmp_path / "site")
    assert tvbod("import", "alpha", tmp_path / "head.csv", "--config", config).returncode == 0
    r = tvbod("import", "alpha", exported / "alpha.csv", "--config", config)
    assert r.returncode == 0, r.stderr
    assert "12 observations into" in r.stdout and "t=9..20" in r.stdout
    assert "8 skipped, already in the plant (by proposal_id 8, by step 0" in r.stdout
    assert _steps(tmp_path / "site/state") == _steps(exported / "state")


def test_rows_without_proposal_id_are_held_by_their_step(exported, tmp_path):
    text = (exported / "alpha.csv").read_text().splitlines()
    header = text[0].split(",")
    drop = header.index("proposal_id")
    (tmp_path / "noid.csv").write_text("\n".join(
        ",".join(v for i, v in enumerate(line.split(",")) if i != drop) for line in text) + "\n")
    config = _site(tmp_path / "site")
    assert tvbod("import", "alpha", tmp_path / "noid.csv", "--config", config).returncode == 0
    r = tvbod("import", "alpha", tmp_path / "noid.csv", "--config", config)
    assert r.returncode == 0 and "all 20 rows" in r.stdout, r.stdout + r.stderr
    assert "(by proposal_id 0, by step 20;" in r.stdout


def test_append_imports_held_rows_again_as_new_steps(exported, tmp_path):
    config = _site(tmp_path / "site")
    assert tvbod("import", "alpha", exported / "alpha.csv", "--config", config).returncode == 0
    r = tvbod("import", "alpha", exported / "alpha.csv", "--config", config, "--append")
    assert r.returncode == 0, r.stderr
    assert "20 observations into" in r.stdout and "t=21..40" in r.stdout and "0 skipped" in r.stdout
    assert [s[0] for s in _steps(tmp_path / "site/state")] == list(range(1, 41))


def test_an_export_imported_into_its_own_plant_is_held_by_its_ids(exported, tmp_path):
    shutil.copytree(exported, tmp_path / "own", ignore=shutil.ignore_patterns("run"))
    r = tvbod("import", "alpha", tmp_path / "own/alpha.jsonl", "--config", tmp_path / "own/tvbod.yaml")
    assert r.returncode == 0 and "all 20 rows" in r.stdout, r.stdout + r.stderr
    assert _steps(tmp_path / "own/state") == _steps(exported / "state")


@pytest.mark.parametrize(("content", "message"), [
    ('{"t": 1, "kp": 1.0}\n', "line 1: missing column(s) ki, measurement (needed: kp, ki, "
     "measurement; as tvbod export writes, read as JSON lines)"),
    ('{"kp": 1.0, "ki": 0.0, "measurement": 1}\n{"kp": 1.0,\n', "line 2: not JSON (Expecting"),
    ('{"kp": 1.0, "ki": 0.0, "measurement": 1}\n[1, 2]\n', "line 2: a JSON list, not an object"),
    ('{"kp": "abc", "ki": 0.0, "measurement": 1}\n', "line 1, column kp: 'abc' is not a number"),
    ('{"kp": true, "ki": 0.0, "measurement": 1}\n', "line 1, column kp: True is not a number"),
    ('{"kp": 1.0, "ki": 0.0, "measurement": null}\n', "line 1, column measurement: None is not"),
    ('{"t": 1.5, "kp": 1.0, "ki": 0.0, "measurement": 1}\n', "line 1, column t: 1.5 is not a step number"),
    ('{"proposal_id": 7, "kp": 1.0, "ki": 0.0, "measurement": 1}\n',
     "line 1, column proposal_id: 7 is not a string"),
    ('{"kp": 1.0, "ki": 0.0, "measurement": 1, "failed": "maybe"}\n',
     "line 1, column failed: 'maybe' is not true or false"),
    ("t,kp,ki,measurement\n0,1.0,0.0,1\n", "line 2, column t: '0' is not a step number"),
])
def test_a_bad_file_is_one_line_naming_file_line_and_column_and_nothing_is_written(
        tmp_path, capsys, content, message):
    from tvbod.commands import main

    config = _site(tmp_path / "site")
    (tmp_path / "in.jsonl").write_text(content)
    assert main(["import", "alpha", str(tmp_path / "in.jsonl"), "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"{tmp_path / 'in.jsonl'} {message}" in err, err
    assert not (tmp_path / "site" / "state").exists()
