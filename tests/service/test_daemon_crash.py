"""SIGKILL at random moments of a 200-step session with a retrying client: afterwards the history
and the dataset equal those of an uninterrupted run fed the same measurements."""

import random

from daemon_harness import Daemon, KillSchedule, assert_bounded_recovery, drive, measurement_history
from history import check_history

from tvbod.service.store import PlantStore

STEPS = 200
KILLS = 24


def _final_state(d):
    rec = PlantStore(d.state, "alpha").recover()
    assert rec.records_after_checkpoint == []  # a clean stop checkpointed everything
    s = rec.state["strategy"]
    return s["t"], s["resets"], s["gp"]["X"], s["gp"]["y"]


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path):
    ref = Daemon(tmp_path / "ref", checkpoint_every=7).start()
    drive(ref, STEPS)
    assert ref.stop() == 0

    d = Daemon(tmp_path / "crash", checkpoint_every=7).start()
    rng = random.Random(20261130)
    log: list[dict] = []
    with KillSchedule(d, rng.sample(range(2, STEPS - 2), KILLS), rng) as schedule:
        reconnects = drive(d, STEPS, schedule, log=log)
    d.wait_ready()
    assert d.stop() == 0
    kills = [schedule.kills]
    assert kills[0] == KILLS and reconnects > 0

    history, expected = measurement_history(d), measurement_history(ref)
    assert [h[0] for h in history] == list(range(1, STEPS + 1)), "no step lost or duplicated"
    assert history == expected
    assert _final_state(d) == _final_state(ref)
    tells = PlantStore(d.state, "alpha").recover().state["tells"]
    counts = check_history(log, d.state / "plants" / "alpha", tells_counted=tells)
    assert counts["acknowledged_tells"] == STEPS
    restored = [e for e in d.events() if e["event"] == "plant_restored"]
    assert len(restored) == kills[0] + 1  # the first start and one per kill
    # Bounded journals and flat restart work however many kills (tests/support/daemon_harness.py).
    assert_bounded_recovery(d, "alpha", 7, schedule.targets, STEPS)
