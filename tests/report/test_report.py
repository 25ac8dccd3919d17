"""`tvbod report`: the page's numbers are the export's and `tvbod best`'s, read from a real
daemon's state directory; resets, regime changes, events and a quarantine are on the page."""

import json
import re
import subprocess
import sys
from html import escape

import pytest
from daemon_harness import Daemon, objective
from upgrade_fixtures import copy_fixture

STEPS = 24  # `objective` jumps at t = 15


def _tvbod(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvbod", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def page_data(html: str) -> dict:
    """The JSON the page embeds (`tvbod-report-data`)."""
    m = re.search(r'<script type="application/json" id="tvbod-report-data">(.*?)</script>', html,
                  re.S)
    assert m, "the page embeds no data block"
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A live daemon after STEPS steps of `alpha` (a reset after the jump at t = 15; the
    adapter's metadata says which regime it ran in), with `tvbod best`'s answer."""
    root = tmp_path_factory.mktemp("site")
    d = Daemon(root).start()
    with d.client() as c:
        for _ in range(STEPS):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]),
                   metadata={"regime": int(p["t"] >= 15), "note": f"step {p['t']}"})
        best = c.best()
    yield root, d, best
    assert d.stop() == 0


def test_the_pages_steps_equal_the_export_and_its_best_gains_equal_tvbod_best(site, tmp_path):
    root, _, best = site
    plant = root / "state" / "plants" / "alpha"
    out = _tvbod("report", str(plant), "--out", str(tmp_path / "alpha.html"),
                 "--config", str(root / "tvbod.yaml"))
    assert out.returncode == 0, out.stderr
    assert f"alpha -> {tmp_path / 'alpha.html'}" in out.stdout
    data = page_data((tmp_path / "alpha.html").read_text())
    export = _tvbod("export", str(plant), "--format", "jsonl")
    rows = [json.loads(line) for line in export.stdout.splitlines()]
    assert len(rows) == len(data["steps"]) == STEPS
    for row, shown in zip(rows, data["steps"]):
        assert {k: shown[k] for k in row} == row
    assert data["best"]["gains"] == best["gains"]
    assert data["best"]["mean"] == pytest.approx(best["mean"], rel=1e-9)
    assert data["best"]["std"] == pytest.approx(best["std"], rel=1e-9)
    assert data["best"]["measured_at"] == best["measured_at"]


def test_the_page_marks_resets_and_regime_changes_and_lists_the_test_that_fired(site, tmp_path):
    root, d, _ = site
    out = _tvbod("report", str(root / "state" / "plants" / "alpha"), "--out",
                 str(tmp_path / "a.html"), "--config", str(root / "tvbod.yaml"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "a.html").read_text()
    resets = [e for e in d.events() if e["event"] == "reset"]
    assert resets
    assert html.count('class="reset-marker"') >= 3 * len(resets)  # measurement, tests, gains
    assert html.count('<tr class="reset">') == len(resets)
    first = resets[0]
    fired = (f"point test: psi {first['psi']:.4g} > threshold {first['threshold']:.4g}"
             if first["test"] == "point" else "window test: |sum e|")
    assert escape(fired) in html
    assert 'class="regime-marker"' in html and "t = 15: regime 0 &rarr; 1" in html
    assert "step 3" not in html.split('id="summary"')[1].split("</table>")[0]  # not a regime
    assert "kp [1]" in html and "ki [1/s]" in html  # units from the plant file
    assert "name: alpha" in html  # the plant file itself
    assert "http://" not in html and "https://" not in html and "<script>" not in html


def test_without_a_daemon_file_the_page_shows_the_recorded_optimizer(site, tmp_path):
    root, _, _ = site
    out = _tvbod("report", str(root / "state" / "plants" / "alpha"), "--out",
                 str(tmp_path / "a.html"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "a.html").read_text()
    assert "the optimizer settings recorded in the state" in html and "et-gp-ucb" in html
    assert page_data(html)["steps"][-1]["t"] == STEPS


def test_last_keeps_the_newest_steps_and_says_so(site, tmp_path):
    root, _, _ = site
    out = _tvbod("report", str(root / "state" / "plants" / "alpha"), "--last", "5", "--out",
                 str(tmp_path / "a.html"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "a.html").read_text()
    assert [s["t"] for s in page_data(html)["steps"]] == list(range(STEPS - 4, STEPS + 1))
    assert f"steps {STEPS - 4}..{STEPS} of {STEPS} shown" in html


def test_all_writes_one_page_per_plant_of_a_state_directory(tmp_path):
    d = Daemon(tmp_path / "d", {"alpha": {}, "beta": {"sense": "maximize", "seed": 2}}).start()
    for plant in ("alpha", "beta"):
        with d.client(plant) as c:
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    assert d.stop() == 0
    out = _tvbod("report", "--all", str(d.state), "--out", str(tmp_path / "pages"))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["alpha.html", "beta.html"]
    assert '<h1 id="plant-name">beta</h1>' in (tmp_path / "pages" / "beta.html").read_text()


def test_a_plant_the_daemon_would_quarantine_says_so_on_its_page(tmp_path):
    root = copy_fixture("poisoned-0.2.0/term", tmp_path)
    out = _tvbod("report", str(root / "state" / "plants" / "alpha"), "--out",
                 str(tmp_path / "alpha.html"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "alpha.html").read_text()
    assert 'id="restore-error"' in html and "quarantines it" in html and "tvbod repair" in html


@pytest.mark.parametrize("args, message", [
    (["report", "nowhere"], "is not a plant's state directory"),
    (["report", "--all", "nowhere"], "is not a state directory"),
    (["report", ".", "--last", "0"], "--last must be at least 1"),
])
def test_a_path_that_is_no_plant_is_refused_with_exit_2(tmp_path, args, message):
    out = _tvbod(*args, cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr


def test_a_history_with_a_step_missing_is_drawn_with_a_warning(site, tmp_path):
    import shutil

    root, _, _ = site
    plant = tmp_path / "plants" / "alpha"
    shutil.copytree(root / "state" / "plants" / "alpha", plant,
                    ignore=shutil.ignore_patterns("lock*"))
    events = plant / "events.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    events.write_text("".join(l for l in lines if '"proposal_id": "alpha:7"' not in l
                              or '"event": "measurement"' not in l))
    out = _tvbod("report", str(plant), "--out", str(tmp_path / "a.html"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "a.html").read_text()
    assert "the recorded history is incomplete" in html
    assert 7 not in [s["t"] for s in page_data(html)["steps"]]
