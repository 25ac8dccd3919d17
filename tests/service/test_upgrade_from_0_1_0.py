"""State written by tvbod 0.1.0 (tests/fixtures/legacy-0.1.0: a daemon session with resets, a
checkpoint rotation and a pending proposal, whose plant file names no trigger) replays exactly,
and a 0.2 daemon continues it under the robust trigger (and today's MAP refit: `objective:
factored`, `refit_tolerance`) as a configuration change at start."""

import shutil
import subprocess
import sys
from pathlib import Path

from daemon_harness import Daemon, objective

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy-0.1.0"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "legacy"
    shutil.copytree(FIXTURE, root)
    return root


def _replay(plant_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tvbod", "replay", str(plant_dir)],
                          capture_output=True, text=True, timeout=120)


def test_state_written_by_0_1_0_replays_exactly_with_the_paper_trigger(tmp_path):
    root = _copy(tmp_path)
    out = _replay(root / "state" / "plants" / "alpha")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "30 steps reproduced exactly" in out.stdout and "[15, 16]" in out.stdout


def test_a_0_2_daemon_continues_0_1_0_state_and_replay_follows_the_trigger_change(tmp_path):
    root = _copy(tmp_path)
    d = Daemon(root, existing=True).start()  # the fixture's own files
    with d.client() as c:
        assert c.hello()["pending"] is not None  # the 0.1.0 proposal is still pending
        for _ in range(8):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    assert d.stop() == 0
    change = [e for e in d.events() if e["event"] == "config_reloaded"]
    assert change and change[-1]["at"] == "start" and "trigger" in change[-1]["changed"]
    # the stored mapping means tvbod 0.2's refit; today's default refit takes over at start
    assert {"hyperparameters.objective", "hyperparameters.refit_tolerance"} <= set(
        change[-1]["changed"])
    out = _replay(root / "state" / "plants" / "alpha")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "38 steps reproduced exactly" in out.stdout
