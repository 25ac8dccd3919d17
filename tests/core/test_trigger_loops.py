"""A trigger that cannot loop: the refractory period's backoff (a bound on resets that needs no
model) and the uninformed hold from the first point of D (no reset for a residual that tests only
the level a reset re-centred on); old state keeps the fixed refractory period."""

import numpy as np
import pytest
from scipy.stats import binom

from tvbod.core import SpecError, make_strategy, parse_spec
from tvbod.core.behaviours import read_stored, spelled
from tvbod.core.trigger import RobustTrigger, hold_steps, next_level

FIXED = {"offset": 0.0, "scale": 1.0}


def _adversary(trigger: RobustTrigger, steps: int) -> list[int]:
    """Reset steps when every residual breaks the band (|e| = 100 against sigma = 0.1)."""
    resets, t_reset = [], 0
    for t in range(1, steps + 1):
        if trigger.evaluate(100.0, 0.0, 0.1, t - t_reset, n=5).fired:
            trigger.on_reset(t)
            resets.append(t)
            t_reset = t
    return resets


def test_backoff_doubles_the_hold_in_a_loop_and_caps_resets_whatever_the_measurements():
    # h = 3 * 2^(k-1): a reset may come at t' = h + 1, so the gaps are 4, 7, 13, 25, 49, 97;
    # a gap of 97 >= 50 steps lowers the level by one before raising it, so the hold stays 96:
    # resets at 4, 8, 15, 28, 53, 102, 199, 296 -- eight in 300 steps, then one per 97 steps.
    resets = _adversary(RobustTrigger(0.1, 0.02, refractory=3, backoff=2.0, burst_steps=50), 300)
    assert resets == [4, 8, 15, 28, 53, 102, 199, 296]
    long = np.diff(_adversary(RobustTrigger(0.1, 0.02, refractory=3, backoff=2.0,
                                            burst_steps=50), 3000))
    assert long.max() < 2 * 2.0 * 50  # the documented ceiling on the hold: 2 backoff burst_steps
    assert len(long) + 1 <= 5 + 3000 / 97 + 1


def test_without_backoff_the_refractory_period_is_fixed_as_in_stored_state():
    resets = _adversary(RobustTrigger(0.1, 0.02, refractory=3, backoff=1.0), 40)
    assert np.all(np.diff(resets) == 4) and resets[0] == 4


def test_the_level_falls_by_one_per_quiet_burst_period_and_rises_by_one_per_reset():
    assert next_level(0, None, 10, 50) == 1
    assert next_level(3, 100, 130, 50) == 4  # within one burst period: up
    assert next_level(3, 100, 160, 50) == 3  # one quiet period: down one, up one
    assert next_level(3, 100, 400, 50) == 1  # six quiet periods: from 0, up one
    assert [hold_steps(3, 2.0, k) for k in range(5)] == [3, 3, 6, 12, 24]
    assert hold_steps(3, 1.5, 3) == round(3 * 1.5**2)


def test_an_isolated_reset_after_a_quiet_period_holds_only_the_refractory_period():
    trig = RobustTrigger(0.1, 0.02, refractory=3, backoff=2.0, burst_steps=50)
    for t in (10, 20, 30):
        trig.on_reset(t)
    assert trig.hold == 12
    trig.on_reset(400)
    assert trig.hold == 3


def test_backoff_state_round_trips_and_state_without_it_loads_at_level_zero():
    a = RobustTrigger(0.1, 0.02, backoff=2.0)
    for t in (5, 9, 16):
        a.on_reset(t)
    b = RobustTrigger(0.1, 0.02, backoff=2.0)
    b.load_state_dict(a.state_dict())
    assert (b.level_, b.last_reset_, b.hold) == (3, 16, 12)
    old = {"residuals": [[0.1, 0.2]], "reset_steps": [5, 9]}  # a state of a trigger without backoff
    c = RobustTrigger(0.1, 0.02)
    c.load_state_dict(old)
    assert (c.level_, c.last_reset_, c.hold) == (0, None, 3)


def _box(extra=None, seed=0):
    return {"domain": {"type": "box", "lower": [0.0, 0.0], "upper": [4.0, 4.0]},
            "kernel": {"lengthscales": 0.3}, "noise_variance": 0.01, "seed": seed,
            "budget": {"candidates": 128, "starts": 2, "maxiter": 15}, "measurement": FIXED,
            **(extra or {})}


@pytest.mark.parametrize("since, loops", [(1, False), ("min_points", True)])
def test_after_a_reset_a_surprise_far_from_its_one_point_does_not_reset_again(since, loops):
    # The loop of a re-centred level: after a reset D = {(x_t, y_t)}; a measurement far from x_t
    # tests the prior, not D. With `uninformed_from: min_points` (stored state's meaning) it
    # resets again; from the first point it is held.
    s = make_strategy(parse_spec(_box({"trigger": {"refractory": 0}}),
                                 {"trigger.uninformed_from": since}))
    for x in np.random.default_rng(0).uniform(0.0, 0.5, (12, 2)):
        s.tell(x, 0.0)
    assert s.tell(np.array([0.25, 0.25]), 5.0).reset and s.dataset_size == 1
    far = s.tell(np.array([3.8, 3.8]), -5.0)
    assert far.reset is loops and far.uninformed is not loops
    if not loops:  # a surprise where D knows the answer still resets
        assert s.tell(np.array([0.3, 0.25]), -5.0).reset


def test_holds_add_no_false_alarm_on_gp_prior_samples_with_the_default_trigger():
    # The default robust trigger (backoff, uninformed hold from |D| = 1) on objectives drawn from
    # the GP prior: no more runs with a reset than delta_B allows (99.9 % binomial quantile).
    grid = np.linspace(0, 1, 40)[:, None]
    L = np.linalg.cholesky(np.exp(-0.5 * ((grid - grid.T) / 0.2) ** 2) + 1e-9 * np.eye(40))
    runs, fired_runs = 150, 0
    for seed in range(runs):
        rng = np.random.default_rng(30_000 + seed)
        f = L @ rng.standard_normal(40)
        s = make_strategy({"domain": {"type": "points", "points": grid.tolist()},
                           "kernel": {"lengthscales": 0.2}, "noise_variance": 0.02, "seed": seed,
                           "delta_b": 0.3, "measurement": FIXED})
        fired = False
        for _ in range(40):
            x = s.ask()
            fired |= s.tell(x, f[int(round(x[0] * 39))] + rng.normal(0.0, 0.02**0.5)).reset
        fired_runs += fired
    assert fired_runs <= binom.ppf(0.999, runs, 0.3)


def test_trigger_keys_parse_with_defaults_and_stored_mappings_keep_the_old_meaning():
    t = parse_spec(_box()).trigger
    assert (t.uninformed_from, t.backoff) == (1, 2.0)
    t = parse_spec(_box(), {"trigger.uninformed_from": "min_points", "trigger.backoff": 1}).trigger
    assert (t.uninformed_from, t.backoff) == (None, 1.0)
    stored = spelled(read_stored(_box({"trigger": "robust"})))["trigger"]
    assert (stored["uninformed_from"], stored["backoff"]) == ("min_points", 1.0)
    new = spelled(_box({"trigger": "robust"}))["trigger"]
    assert (new["uninformed_from"], new["backoff"]) == (1, 2.0)


@pytest.mark.parametrize("key, value", [("backoff", 0.5), ("backoff", 11), ("backoff", "fast"),
                                        ("uninformed_from", 0), ("uninformed_from", "always")])
def test_bad_trigger_keys_name_the_key(key, value):
    with pytest.raises(SpecError) as err:
        parse_spec(_box(), {f"trigger.{key}": value})
    assert err.value.key == f"trigger.{key}"
    with pytest.raises(SpecError, match="fixed by the behaviour version") as err:
        parse_spec(_box({"trigger": {key: value}}))
    assert err.value.key == f"trigger.{key}"
