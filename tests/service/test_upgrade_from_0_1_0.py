"""State written by tvbod 0.1.0 (tests/fixtures/legacy-0.1.0: a daemon session with resets, a
checkpoint rotation and a pending proposal, whose plant file names no trigger) replays exactly,
and a 0.2 daemon continues it under the robust trigger (and today's MAP refit: `objective:
factored`, `refit_tolerance`, `refit_stop`) as a configuration change at start."""

from daemon_harness import Daemon, objective
from upgrade_fixtures import copy_fixture, replays_to_round_off


def test_state_written_by_0_1_0_replays_to_round_off_with_the_paper_trigger(tmp_path):
    root = copy_fixture("legacy-0.1.0", tmp_path)
    assert "[15, 16]" in replays_to_round_off(root, "alpha", 30)


def test_a_0_2_daemon_continues_0_1_0_state_and_replay_follows_the_trigger_change(tmp_path):
    root = copy_fixture("legacy-0.1.0", tmp_path)
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
    assert {"hyperparameters.objective", "hyperparameters.refit_tolerance",
            "hyperparameters.refit_stop"} <= set(change[-1]["changed"])
    replays_to_round_off(root, "alpha", 38)
