"""State written by main d70b7a9, before `budget.polish` and `budget.tolerance` existed
(tests/fixtures/state-main-lbfgsb: every proposal polished by L-BFGS-B to SciPy's own tolerance)
replays exactly (a stored mapping without the keys means what it meant). The same plant file
continues it under today's `budget.tolerance` as a configuration change at start; one that opts in
to `budget.polish: newton` under the Newton polish as well; replay follows both."""

import shutil
from pathlib import Path

from daemon_harness import Daemon, objective
from upgrade_fixtures import ROUND_OFF, copy_fixture, replay, replays_to_round_off

FIXTURE = "state-main-lbfgsb"


def _continue(root: Path, steps: int) -> list[dict]:
    d = Daemon(root, existing=True).start()
    try:
        with d.client("beta") as c:
            for _ in range(steps):
                p = c.ask()
                c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    finally:
        assert d.stop() == 0
    return [e for e in d.events("beta") if e["event"] == "config_reloaded"]


def test_state_written_before_budget_polish_replays_to_round_off(tmp_path):
    root = copy_fixture(FIXTURE, tmp_path)
    assert "[4, 15]" in replays_to_round_off(root, "beta", 16)


def test_opting_in_to_the_newton_polish_is_a_change_at_start_that_replay_follows(tmp_path):
    root = copy_fixture(FIXTURE, tmp_path)
    plant = root / "plants" / "beta.yaml"
    original = tmp_path / "beta-lbfgsb.yaml"
    shutil.copy(plant, original)
    plant.write_text(plant.read_text() + "  budget: {polish: newton}\n")
    changes = _continue(root, 8)
    assert changes and changes[-1]["at"] == "start"
    assert changes[-1]["changed"] == ["budget.polish", "budget.tolerance", "trigger.backoff",
                                     "trigger.uninformed", "trigger.uninformed_from"]
    replays_to_round_off(root, "beta", 24)
    # the eight new steps really were Newton's: under the old polish throughout they diverge
    out = replay(root, "beta", "--config", str(original), "--tolerance", ROUND_OFF)
    assert out.returncode != 0 and "DIVERGED after" in out.stdout, out.stdout


def test_the_new_defaults_are_a_change_at_start_that_replay_follows(tmp_path):
    # the polish tolerance and the trigger's uninformed rule did not exist when it was written
    root = copy_fixture(FIXTURE, tmp_path)
    changes = _continue(root, 8)  # the same plant file: only the defaults changed
    assert [(c["at"], c["changed"]) for c in changes] == [
        ("start", ["budget.tolerance", "trigger.backoff", "trigger.uninformed",
                   "trigger.uninformed_from"])]
    replays_to_round_off(root, "beta", 24)


def test_a_plant_file_without_measurement_keeps_the_fixed_map_its_state_was_written_under(tmp_path):
    # `auto` is today's default, but a plant with data keeps the map its targets are on (0 / 1),
    # at the restart and at a live reload of the same file
    import signal
    import time

    from tvbod.service.store import PlantStore

    root = copy_fixture(FIXTURE, tmp_path)
    assert "measurement" not in (root / "plants" / "beta.yaml").read_text().split("optimizer:")[1]
    d = Daemon(root, existing=True).start()
    try:
        with d.client("beta") as c:
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not any(e["event"] in ("config_reloaded", "config_reload_failed")
                      and e.get("at") != "start" for e in d.log_events()):
            assert time.monotonic() < deadline, "no reload outcome"
            time.sleep(0.1)
    finally:
        assert d.stop() == 0
    assert not [e for e in d.log_events() if e["event"] == "config_reload_failed"]
    assert not [e for e in d.events("beta") if e["event"] == "plant_quarantined"]
    stored = PlantStore(root / "state", "beta").recover().state["optimizer"]
    assert stored["measurement"] == {"offset": 0.0, "scale": 1.0}
