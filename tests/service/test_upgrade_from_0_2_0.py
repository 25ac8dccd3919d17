"""State written by tvbod 0.2.0 as of main 11e3fa2, before the service was restructured
(tests/fixtures/state-0.2.0: a daemon session with a failed tell, an observation, three resets, a
live reload of delta_b, a stop, a restart, and a SIGKILL with proposal alpha:24 pending in the
journal after the checkpoint) replays exactly, and today's daemon continues it."""

from daemon_harness import Daemon, objective
from upgrade_fixtures import copy_fixture, replays_to_round_off


def test_state_written_by_0_2_0_replays_to_round_off(tmp_path):
    root = copy_fixture("state-0.2.0", tmp_path)
    assert "[4, 17, 21]" in replays_to_round_off(root, "alpha", 23)


def test_todays_daemon_continues_0_2_0_state_with_its_pending_proposal(tmp_path):
    root = copy_fixture("state-0.2.0", tmp_path)
    d = Daemon(root, existing=True).start()
    try:
        restored = [e for e in d.events() if e["event"] == "plant_restored"][-1]
        assert restored["problems"] == [] and restored["pending"] == "alpha:24"
        with d.client() as c:
            p = c.ask()  # the journaled proposal, recomputed identically by today's code
            assert (p["proposal_id"], p["gains"]) == ("alpha:24", {"kp": 0.0, "ki": 1.0})
            for _ in range(4):
                c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
                p = c.ask()
    finally:
        assert d.stop() == 0
    replays_to_round_off(root, "alpha", 27)
