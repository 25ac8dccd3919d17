"""State written by main 830a3ca, whose stored optimizer mappings spell out every default that
changed between releases (tests/fixtures/state-main-spelled), replays exactly; today's daemon,
which records the behaviour version instead, restarts on it with the same plant files without a
configuration change, continues it, and replay follows."""

import json

from daemon_harness import Daemon, objective
from upgrade_fixtures import copy_fixture, replays_to_round_off

from tvbod.core.behaviours import NEWEST, read_stored, spelled
from tvbod.service.config import load_plant_config
from tvbod.service.store import PlantStore

FIXTURE = "state-main-spelled"


def test_state_written_with_spelled_out_defaults_replays_to_round_off(tmp_path):
    root = copy_fixture(FIXTURE, tmp_path)
    assert "[23]" in replays_to_round_off(root, "alpha", 27)
    assert "[4, 15]" in replays_to_round_off(root, "beta", 27)


def test_its_stored_mappings_read_as_the_newest_version_with_the_fingerprint_they_have(tmp_path):
    root = copy_fixture(FIXTURE, tmp_path)
    for plant in ("alpha", "beta"):
        [path] = (root / "state" / "plants" / plant / "optimizers").glob("*.json")
        stored = json.loads(path.read_text())
        assert "behaviour" not in stored and "budget" in stored  # spelled out, no version
        config = load_plant_config(root / "plants" / f"{plant}.yaml")
        assert config.fingerprint == path.stem  # the same plant file, the same fingerprint
        assert spelled(read_stored(stored)) == spelled(config.optimizer_mapping)
    assert read_stored(stored)["behaviour"] <= NEWEST


def test_todays_daemon_restarts_on_it_without_a_configuration_change(tmp_path):
    root = copy_fixture(FIXTURE, tmp_path)
    d = Daemon(root, existing=True).start()
    try:
        for plant in ("alpha", "beta"):
            with d.client(plant) as c:
                for _ in range(3):
                    p = c.ask()
                    c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    finally:
        assert d.stop() == 0
    for plant in ("alpha", "beta"):
        events = d.events(plant)
        restored = [e for e in events if e["event"] == "plant_restored"][-1]
        assert restored["config_changed"] is False and restored["problems"] == []
        assert not [e for e in events if e["event"] == "config_reloaded"]
        state = PlantStore(root / "state", plant).recover().state
        assert state["optimizer"]["behaviour"] == NEWEST  # written by today's code
        assert "tolerance" not in state["optimizer"].get("budget", {})
        # one optimizer file: the fingerprint did not change, so nothing new was recorded
        assert len(list((root / "state" / "plants" / plant / "optimizers").glob("*.json"))) == 1
        replays_to_round_off(root, plant, 30)


def test_replay_what_ifs_take_user_keys_and_a_version_but_not_a_fixed_setting(tmp_path):
    from upgrade_fixtures import replay

    root = copy_fixture(FIXTURE, tmp_path)
    for key in ("delta_b=0.3", "behaviour=2"):
        out = replay(root, "alpha", "--set", key)
        assert out.returncode == 0 and "what-if resets at:" in out.stdout, out.stdout + out.stderr
    out = replay(root, "alpha", "--set", "measurement.pessimism=0")
    assert out.returncode != 0
    assert "measurement.pessimism: is fixed by the behaviour version" in out.stderr
