"""A plant whose model work is light (workers.py `light_model`: no worker job takes it) gets its
next proposal computed on the loop while no message waits, so its ask only journals it; the
proposals are the same as when each ask computed its own (tvbod/service/server.py,
`_propose_when_idle`)."""

import subprocess
import sys
import time

from daemon_harness import Daemon, arms_plant_yaml

MATRIX = [[1.0, 0.5, 0.25, 0.1], [0.5, 1.0, 0.5, 0.25], [0.25, 0.5, 1.0, 0.5], [0.1, 0.25, 0.5, 1.0]]
REWARDS = [0.1, 0.9, 0.4, 0.2]


def _status(client):
    return client.status("arms")["plants"][0]


def _wait_prepared(client, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _status(client)["prepared"]:
            return True
        time.sleep(0.02)
    return False


def test_a_light_plant_is_prepared_after_each_tell_without_an_ask_and_replays_exactly(tmp_path):
    d = Daemon(tmp_path)  # and a box plant, `alpha`, whose model work runs on a worker
    (tmp_path / "plants" / "arms.yaml").write_text(arms_plant_yaml("arms", MATRIX, seed=3))
    d.start()
    with d.client("arms") as c:
        assert not _status(c)["prepared"]  # the first proposal waits for the first ask
        for step in range(12):
            p = c.ask()
            assert not _status(c)["prepared"]  # a proposal is pending
            arm = int(p["gains"]["arm"])
            c.tell(p["proposal_id"], REWARDS[arm] + 0.01 * (step % 3))
            assert _wait_prepared(c), f"step {step}: the next proposal was not prepared"
    assert d.stop() == 0
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", d.state / "plants" / "arms"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "verified: 12 steps" in out.stdout, out.stdout + out.stderr
