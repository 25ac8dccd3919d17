"""Adaptive exploration in the strategy: EI, adaptive kappa/lambda, A-GP-UCB and random search via the spec."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tvbod.core import SpecError, StateError, make_strategy, parse_spec
from tvbod.core.exploration import AdaptiveKappaLambda, AGPUCBScaling

BOX = {"domain": {"lower": [0.0, 0.0], "upper": [1.0, 1.0]}, "seed": 3, "noise_variance": 0.01,
       "budget": {"candidates": 128}, "measurement": {"offset": 0.0, "scale": 1.0}}
POINTS = {"domain": {"type": "points", "points": np.random.default_rng(0).random((60, 2)).tolist()},
          "seed": 3, "noise_variance": 0.01}
VARIANTS = {
    "ei": {"acquisition": "ei"},
    "ei-xi": {"acquisition": {"type": "ei", "xi": 0.01}},
    "adaptive": {"exploration": {"type": "adaptive", "lambda0": 0.1}},
    "agpucb": {"exploration": {"type": "agpucb", "norm_bound": 0.25}},
    "agpucb-map-bound": {"exploration": {"type": "agpucb", "estimator": "bound", "rule": "divide"},
                         "hyperparameters": {"lengthscales": "map"}},
    "agpucb-floor": {"exploration": {"type": "agpucb", "estimator": "sigma-floor"}},
    "random": {"strategy": "random-search"},
}


def f(x):
    return float(np.sin(5 * x[0]) * np.cos(3 * x[1]))


def _run(spec, steps, jump_at=None):
    s = make_strategy(spec)
    for t in range(1, steps + 1):
        x = s.ask()
        s.tell(x, f(x) + (5.0 if jump_at and t >= jump_at else 0.0))
    s.settle()
    return s


@pytest.mark.parametrize("domain", [BOX, POINTS], ids=["box", "points"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_state_round_trip_proposes_bit_identical_next_points(domain, variant):
    spec = {**domain, **VARIANTS[variant]}
    a = _run(spec, 12, jump_at=9)
    state = json.loads(json.dumps(a.state_dict()))  # plain data
    b = make_strategy(spec)
    b.load_state_dict(state)
    for _ in range(4):
        xa, xb = a.ask(), b.ask()
        assert np.array_equal(xa, xb)
        a.tell(xa, f(xa))
        b.tell(xb, f(xb))
    assert a.state_dict() == b.state_dict()


def test_without_new_keys_the_state_has_no_exploration_entry():
    assert "exploration" not in _run(BOX, 3).state_dict()


def test_composition_with_the_event_trigger_resets_exploration_state():
    # Property: a trigger keeps kappa/lambda, forgets the moving averages (adaptive) ...
    # (the surprise lands where D knows little: the uninformed rule is off so that it resets)
    spec = {**BOX, "noise_variance": 0.001, "exploration": {"type": "adaptive"}}
    s = make_strategy(parse_spec(spec, {"trigger.uninformed": "off"}))
    for _ in range(8):
        x = s.ask()
        s.tell(x, f(x))
    s.settle()
    e: AdaptiveKappaLambda = s.exploration
    kappa, lam = e.kappa_, e.lambda_
    x = s.ask()
    r = s.tell(x, f(x) + 10.0)
    s.settle()  # the exploration update is the tell's deferred follow-up
    assert r.reset and r.reset_reason == "event"
    assert e.kappa_ == kappa  # the triggering surprise is not used for kappa
    assert e.delta_bar_ is None  # no posterior comparison yet on the new dataset
    assert e.i_bar_ is not None and e.lambda_ == lam  # I_t of the new dataset starts the average
    # ... and restarts A-GP-UCB's clock and scaling (t' counts from the reset)
    spec = {**BOX, "noise_variance": 0.001,
            "exploration": {"type": "agpucb", "estimator": "bound", "norm_bound": 0.01}}
    s = make_strategy(parse_spec(spec, {"trigger.uninformed": "off"}))
    for _ in range(8):
        x = s.ask()
        s.tell(x, f(x))
    s.settle()
    g: AGPUCBScaling = s.exploration
    assert g.tau_ == 8 and g.h_ > 1.0
    x = s.ask()
    assert s.tell(x, f(x) + 10.0).reset
    s.settle()
    assert g.tau_ == 1  # the reset step's point is the first of the new dataset
    assert np.allclose(s.lengthscales, g.lengthscales())


def test_periodic_override_composes_with_exploration():
    spec = {**BOX, "strategy": "gp-ucb", "reset": "periodic", "reset_period": 4,
            "exploration": {"type": "agpucb"}}
    s = _run(spec, 8)
    assert s.resets == 2 and s.dataset_size == 0 and s.exploration.tau_ == 0
    assert parse_spec({**BOX, "reset": "none"}).reset_policy == "none"


def test_agpucb_lengthscales_follow_the_rule():
    spec = {**BOX, "kernel": {"lengthscales": 1.0},
            "exploration": {"type": "agpucb", "estimator": "bound", "norm_bound": 0.01}}
    s = _run(spec, 10)
    g = s.exploration
    assert g.h_ > 1
    assert np.allclose(s.lengthscales, np.minimum(g.theta_map_, 1.0 / g.h_))


def test_adaptive_kappa_is_used_by_ask():
    s = _run({**BOX, "exploration": {"type": "adaptive", "kappa0": 3.0}}, 5)
    assert s.kappa == s.exploration.kappa_


def test_random_search_follows_the_sobol_sequence():
    from scipy.stats import qmc

    s = make_strategy({**BOX, "strategy": "random-search"})
    xs = []
    for _ in range(8):
        xs.append(s.ask())
        s.tell(xs[-1], f(xs[-1]))
    ref = qmc.Sobol(2, scramble=True, seed=3).random(8)
    assert np.allclose(xs, ref)
    assert s.best == max(f(x) for x in xs)


@pytest.mark.parametrize("bad, key", [
    ({"exploration": {"type": "nope"}}, "exploration.type"),
    ({"exploration": {"type": "adaptive", "kappa_min": 2.0, "kappa_max": 1.0}}, "exploration.kappa_max"),
    ({"exploration": {"type": "adaptive", "lambda0": 2.0}}, "exploration.lambda0"),
    ({"exploration": {"type": "adaptive", "ema": 0.0}}, "exploration.ema"),
    ({"exploration": {"type": "adaptive", "norm_bound": 1.0}}, "exploration.norm_bound"),
    ({"exploration": {"type": "agpucb", "exponent": 1.0}}, "exploration.exponent"),
    ({"exploration": {"type": "agpucb", "rule": "max"}}, "exploration.rule"),
    ({"exploration": {"type": "agpucb", "h_max": 0.5}}, "exploration.h_max"),
    ({"acquisition": "pi"}, "acquisition"),
    ({"acquisition": "ei", "exploration": {"type": "adaptive"}}, "exploration.type"),
    ({"reset": "sometimes"}, "reset"),
    ({"reset": "periodic"}, "reset_period"),
    ({"strategy": "r-gp-ucb", "reset_period": 3, "reset": "event"}, "reset"),
    ({"strategy": "random-search", "acquisition": "ei"}, "acquisition"),
])
def test_bad_keys_name_the_key(bad, key):
    with pytest.raises(SpecError) as err:
        parse_spec({**BOX, **bad})
    assert key in str(err.value)


def test_mismatched_exploration_state_is_rejected():
    a = _run({**BOX, "exploration": {"type": "adaptive"}}, 3).state_dict()
    with pytest.raises(StateError):
        make_strategy(BOX).load_state_dict(a)
    del a["exploration"]["kappa"]
    with pytest.raises(StateError):
        make_strategy({**BOX, "exploration": {"type": "adaptive"}}).load_state_dict(a)
