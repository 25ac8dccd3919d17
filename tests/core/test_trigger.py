"""The event trigger against the paper's formulas (Lemma 3), and its statistical behaviour."""

import math

import numpy as np
import pytest

from tvbod.core import make_strategy
from tvbod.core.trigger import EventTrigger, pi_t, rho, wbar

# Hand-computed from pi_t' = pi^2 t'^2 / 6, rho_t' = 2 ln(2 pi_t' / delta_B),
# wbar_t' = sqrt(2 sigma_n^2 ln(2 pi_t' / delta_B)), threshold = sqrt(rho) * 0.3 + wbar:
HAND = [
    # t', delta_B, sigma_n^2, rho, wbar, threshold at sigma = 0.3
    (1, 0.1, 0.02, 6.9868651520494724, 0.3738145302700116, 1.1667948980499792),
    (10, 0.1, 0.02, 16.197205524025655, 0.5691608827743814, 1.7765334421620418),
    (7, 0.05, 0.01, 16.156800109390616, 0.4019552227473928, 1.607820890989571),
]


@pytest.mark.parametrize("tp, db, s2, rho_, wbar_, thr", HAND)
def test_threshold_equals_paper_formula_for_hand_picked_numbers(tp, db, s2, rho_, wbar_, thr):
    assert pi_t(tp) == pytest.approx(math.pi**2 * tp**2 / 6, rel=1e-15)
    assert rho(tp, db) == pytest.approx(rho_, rel=1e-13)
    assert wbar(tp, db, s2) == pytest.approx(wbar_, rel=1e-13)
    assert EventTrigger(db, s2).threshold(0.3, tp) == pytest.approx(thr, rel=1e-13)


def test_trigger_fires_only_strictly_above_threshold():
    trig = EventTrigger(0.1, 0.02)
    thr = trig.threshold(0.3, 1)
    assert not trig.evaluate(1.0 + thr, 1.0, 0.3, 1).fired
    assert trig.evaluate(1.0 - thr - 1e-9, 1.0, 0.3, 1).fired
    d = trig.evaluate(2.5, 1.0, 0.3, 1)
    assert d.psi == pytest.approx(1.5) and d.t_prime == 1


def test_threshold_grows_with_t_prime_and_shrinks_with_delta_b():
    trig = EventTrigger(0.1, 0.02)
    assert trig.threshold(0.2, 5) > trig.threshold(0.2, 4)
    assert EventTrigger(0.01, 0.02).threshold(0.2, 5) > EventTrigger(0.5, 0.02).threshold(0.2, 5)


def test_invalid_trigger_parameters_are_rejected():
    with pytest.raises(ValueError):
        EventTrigger(0.0, 0.02)
    with pytest.raises(ValueError):
        EventTrigger(0.1, 0.0)
    with pytest.raises(ValueError):
        EventTrigger(0.1, 0.02).threshold(0.1, 0)


def _points_spec(seed, delta_b=0.1):
    grid = np.linspace(0, 1, 40)[:, None]
    return {"domain": {"type": "points", "points": grid.tolist()}, "kernel": {"lengthscales": 0.2},
            "noise_variance": 0.02, "delta_b": delta_b, "seed": seed,
            "measurement": {"offset": 0.0, "scale": 1.0}}  # the objective is on the GP's scale


def test_constant_objective_triggers_no_more_often_than_delta_b_allows():
    # Lemma 3: under a static objective, P(any false reset over all t') <= delta_B. 300 runs of 60
    # steps, fixed seeds; 45 is above the 99.9% binomial quantile of Bin(300, 0.1), so a correct
    # trigger passes and one that fires by mistake in >= 15% of runs fails.
    runs_with_reset = 0
    for seed in range(300):
        s = make_strategy(_points_spec(seed))
        noise = np.random.default_rng(10_000 + seed).normal(0, np.sqrt(0.02), 60)
        fired = False
        for t in range(60):
            x = s.ask()
            fired |= s.tell(x, 0.5 + noise[t]).reset
        runs_with_reset += fired
    assert runs_with_reset <= 45


def test_jump_in_objective_triggers_within_a_few_steps():
    delays = []
    for seed in range(10):
        s = make_strategy(_points_spec(seed))
        noise = np.random.default_rng(seed).normal(0, np.sqrt(0.02), 80)
        first = None
        for t in range(1, 81):
            x = s.ask()
            f = np.sin(6 * x[0]) if t <= 40 else np.sin(6 * x[0]) + 2.5
            r = s.tell(x, f + noise[t - 1])
            if r.reset and t > 40 and first is None:
                first = t
        delays.append(first - 40)
    assert max(delays) <= 3, delays


def test_reset_keeps_only_the_triggering_measurement_and_restarts_t_prime():
    s = make_strategy(_points_spec(0))
    for _ in range(10):
        s.tell(s.ask(), 0.0)
    r = s.tell(s.ask(), 5.0)
    assert r.reset and r.reset_reason == "event"
    assert r.dataset_size == 1 and r.t == 11 and r.t_prime == 11
    r2 = s.tell(s.ask(), 5.0)
    assert r2.t_prime == 1 and r2.dataset_size == 2


def test_decide_holds_a_firing_test_while_the_measurement_map_calibrates():
    from tvbod.core.trigger import decide

    trig = EventTrigger(0.1, 0.02)
    far = decide(trig, 5.0, 0.0, 0.1, 3, 4, 0.02, calibrating=False)
    assert far.fired and far.test == "point" and not far.held
    held = decide(trig, 5.0, 0.0, 0.1, 3, 4, 0.02, calibrating=True)
    assert not held.fired and held.held and held.psi == far.psi and held.threshold == far.threshold
    near = decide(trig, 0.01, 0.0, 0.1, 3, 4, 0.02, calibrating=True)
    assert not near.fired and not near.held


def test_decide_on_an_empty_dataset_reports_the_test_but_does_not_reset():
    from tvbod.core.trigger import RobustTrigger, decide

    for trig in (EventTrigger(0.1, 0.02), RobustTrigger(0.1, 0.02, refractory=0)):
        d = decide(trig, 5.0, 0.0, 1.0, 5, 0, 0.02, calibrating=False)
        assert d.test == "point" and not d.fired and not d.held


def test_robust_point_threshold_is_the_papers_with_the_learned_noise():
    from tvbod.core.trigger import RobustTrigger

    d = RobustTrigger(0.1, 0.02).evaluate(0.0, 0.0, 0.3, 7, 3, noise_variance=0.05)
    assert d.threshold == math.sqrt(rho(7, 0.1)) * 0.3 + wbar(7, 0.1, 0.05)
    assert d.threshold == EventTrigger(0.1, 0.02).threshold(0.3, 7, 0.05)
