"""Adaptive kappa/lambda and A-GP-UCB inside the daemon: their state is part of the
checkpoint and the journal replay, so SIGKILLs at random moments change nothing, and `tvbod replay`
reproduces the session (resets included) exactly."""

import random
import subprocess
import sys

import pytest
from daemon_harness import Daemon, KillSchedule, drive, measurement_history

from tvbod.service.store import PlantStore

STEPS = 40
KILLS = 5
EXPLORATION = {
    "adaptive": "  exploration: {type: adaptive, kappa0: 2.0, lambda0: 0.01, mc_points: 200}\n",
    "agpucb": "  exploration: {type: agpucb, norm_bound: 0.25}\n"
              "  hyperparameters: {lengthscales: map, refit_every: 5}\n",
}


def _strategy_state(d):
    rec = PlantStore(d.state, "alpha").recover()
    assert rec.records_after_checkpoint == []
    return rec.state["strategy"]


@pytest.mark.parametrize("kind", sorted(EXPLORATION))
def test_exploration_state_survives_sigkills_and_replays_exactly(tmp_path, kind):
    plants = {"alpha": {"extra": EXPLORATION[kind]}}
    ref = Daemon(tmp_path / "ref", plants, checkpoint_every=4).start()
    drive(ref, STEPS, timeout_s=0.5)
    assert ref.stop() == 0

    d = Daemon(tmp_path / "crash", plants, checkpoint_every=4).start()
    rng = random.Random(6)
    with KillSchedule(d, rng.sample(range(2, STEPS - 2), KILLS), rng) as schedule:
        drive(d, STEPS, schedule, timeout_s=0.5)
    d.wait_ready()
    assert d.stop() == 0
    assert schedule.kills == KILLS

    history = measurement_history(d)
    assert [h[0] for h in history] == list(range(1, STEPS + 1))
    assert history == measurement_history(ref)
    assert any(h[4] for h in history), "the jump at t = 15 must trigger a reset"
    state, expected = _strategy_state(d), _strategy_state(ref)
    assert state["exploration"] == expected["exploration"]
    if kind == "adaptive":
        assert state["exploration"]["kappa"] != 2.0  # the state moved, so the check has teeth
    else:
        assert state["exploration"]["tau"] >= 1
    assert state["gp"]["X"] == expected["gp"]["X"] and state["gp"]["y"] == expected["gp"]["y"]

    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{STEPS} steps reproduced exactly" in out.stdout
