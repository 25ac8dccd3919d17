"""State written by main d70b7a9, before the Newton polish (tests/fixtures/state-main-lbfgsb: every
proposal polished by L-BFGS-B, the stored mapping without `budget.polish`) replays exactly under the
old polish, and today's daemon continues it under `budget.polish: newton` as a configuration change
at start, which replay follows."""

import shutil
import subprocess
import sys
from pathlib import Path

from daemon_harness import Daemon, objective

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state-main-lbfgsb"


def _replay(plant_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tvbod", "replay", str(plant_dir), *extra],
                          capture_output=True, text=True, timeout=120)


def test_state_written_before_the_newton_polish_replays_exactly_under_lbfgsb(tmp_path):
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    out = _replay(root / "state" / "plants" / "beta")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "16 steps reproduced exactly" in out.stdout and "[4, 15]" in out.stdout


def test_the_same_state_under_todays_plant_file_meaning_diverges(tmp_path):
    # the plant file read today means `budget.polish: newton`: its proposals differ in the last
    # digits, so only the stored mapping's history default keeps the replay exact
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    out = _replay(root / "state" / "plants" / "beta", "--config", str(root / "plants" / "beta.yaml"))
    assert out.returncode != 0 and "DIVERGED" in out.stdout, out.stdout + out.stderr


def test_todays_daemon_continues_it_with_the_newton_polish_and_replay_follows(tmp_path):
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    d = Daemon(root, existing=True).start()
    try:
        with d.client("beta") as c:
            for _ in range(4):
                p = c.ask()
                c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    finally:
        assert d.stop() == 0
    events = [e for e in d.events("beta") if e["event"] == "config_reloaded"]
    assert events and events[-1]["at"] == "start" and "budget.polish" in events[-1]["changed"]
    out = _replay(root / "state" / "plants" / "beta")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "20 steps reproduced exactly" in out.stdout
