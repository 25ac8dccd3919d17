"""`forgetting_floor: auto`: the forgetting rate learned by marginal likelihood on a grid
(`grid_fits.fit_forgetting`), against a direct computation and against the rate that
generated the data; the spec key; exact state round trips and replay of the learned rate."""

import json
import math

import numpy as np
import pytest
from scipy.linalg.lapack import dpotrf, dpotrs

from tvbod.core import SpecError, make_strategy
from tvbod.core.grid_fits import (
    FORGETTING_GRID, fit_forgetting, forgetting_log_likelihoods,
)
from tvbod.core.kernels import ForgettingFactor, SquaredExponential
from tvbod.core.spec import parse_spec

NOISE = 0.01


def _sample(eps: float, n: int, seed: int):
    """`(K, y, t)`: n steps of a GP sample with SE(0.2) in space and TV-GP-UCB's factor
    `(1 - eps)^(|t - t'|/2)` in time, at uniform random points of [0, 1]."""
    rng = np.random.default_rng(seed)
    X, t = rng.random((n, 1)), np.arange(1.0, n + 1)
    K = SquaredExponential([0.2])(X, X)
    C = K * ForgettingFactor(eps)(t, t) + NOISE * np.eye(n)
    return K, np.linalg.cholesky(C) @ rng.standard_normal(n), t


def _log_marginal(K, y, t, eps):
    """RW2006 eq. 5.8 without the constant, by a dense solve and slogdet."""
    C = K * ForgettingFactor(eps)(t, t) + NOISE * np.eye(len(y))
    return -0.5 * y @ np.linalg.solve(C, y) - 0.5 * np.linalg.slogdet(C)[1]


@pytest.mark.parametrize("seed", range(4))
def test_the_learned_rate_is_the_grid_argmax_of_the_directly_computed_marginal_likelihood(seed):
    K, y, t = _sample(0.03, 30, seed)
    values = [_log_marginal(K, y, t, e) for e in FORGETTING_GRID]
    assert fit_forgetting(K, y, t, NOISE) == FORGETTING_GRID[int(np.argmax(values))]


def _released_values(K, y, times, noise_variance):
    """The per-eps values as the release that introduced `auto` computed them (a fresh
    `K * T_eps` and a copy per value): the work arrays must change no bit of them, or a journal
    written then would replay to another rate."""
    half_dt = 0.5 * np.abs(np.subtract.outer(times, times))
    out = []
    for eps in FORGETTING_GRID:
        C = K * np.exp(half_dt * math.log1p(-eps)) if eps > 0 else K.copy()
        C[np.diag_indices(len(y))] += noise_variance
        L, info = dpotrf(C, lower=1, clean=1)
        if info != 0:
            out.append(-math.inf)
            continue
        alpha, _ = dpotrs(L, y, lower=1)
        out.append(-0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()))
    return np.array(out)


@pytest.mark.parametrize("n", [2, 3, 17, 46, 96, 201])
def test_the_work_arrays_give_every_value_bit_for_bit_as_fresh_matrices_did(n):
    rng = np.random.default_rng(n)
    for case in range(4):
        A = rng.standard_normal((n, n + 3))
        K = A @ A.T / (n + 3)  # an empirical covariance: symmetric only up to round-off
        if case == 3:
            K -= 2.0 * np.eye(n)  # indefinite: some values do not factor
        y = rng.standard_normal(n)
        times = np.sort(rng.choice(4 * n, n, replace=False)).astype(float)
        values = forgetting_log_likelihoods(K, y, times, NOISE)
        expected = _released_values(K, y, times, NOISE)
        assert values.tobytes() == expected.tobytes()
        finite = np.where(np.isfinite(expected), expected, -math.inf)
        best = FORGETTING_GRID[int(np.argmax(finite))] if np.isfinite(finite).any() else 0.0
        assert fit_forgetting(K, y, times, NOISE) == best


def test_the_grid_spans_no_forgetting_to_a_fast_drift():
    assert FORGETTING_GRID[0] == 0.0 and len(FORGETTING_GRID) == 41
    assert FORGETTING_GRID[1] == pytest.approx(1e-3) and FORGETTING_GRID[-1] == pytest.approx(0.3)
    assert all(a < b for a, b in zip(FORGETTING_GRID, FORGETTING_GRID[1:]))


def test_one_point_says_nothing_about_drift_so_the_rate_is_zero():
    assert fit_forgetting(np.ones((1, 1)), np.array([3.0]), np.array([5.0]), NOISE) == 0.0


def test_static_data_learn_no_forgetting():
    # 40 samples of a static GP (eps = 0), 80 steps each: measured 40/40 at exactly 0
    learned = [fit_forgetting(*_sample(0.0, 80, s), NOISE) for s in range(40)]
    assert sum(e == 0.0 for e in learned) >= 36


@pytest.mark.parametrize("eps", [0.01, 0.05, 0.2])
def test_drifting_data_recover_the_rate_that_generated_them(eps):
    # measured medians 0.009 / 0.048 / 0.19 over 40 samples; quartiles within x1.25 of the truth
    learned = np.array([fit_forgetting(*_sample(eps, 80, s), NOISE) for s in range(40)])
    assert eps / 1.3 <= np.median(learned) <= eps * 1.3
    assert np.mean((learned > eps / 2) & (learned < eps * 2)) >= 0.85


# ---------------------------------------------------------------------- the strategy
def _arms(floor="auto", seed=0):
    rng = np.random.default_rng(7)
    A = rng.standard_normal((6, 12))
    return {"strategy": "et-gp-ucb", "seed": seed, "sense": "maximize",
            "domain": {"type": "arms", "n_arms": 6},
            "kernel": {"type": "matrix", "matrix": (A @ A.T / 12).tolist()},
            "noise_variance": NOISE, "forgetting_floor": floor}


def _drifting(t: int, arm: int) -> float:
    """Each arm's value moves slowly with t: a plant that drifts where nobody measures."""
    return float(np.sin(0.15 * t + arm))


def _run(strategy, steps, start=1):
    for t in range(start, start + steps):
        arm = int(strategy.ask()[0])
        strategy.tell(np.array([arm]), _drifting(t, arm))


def test_auto_floor_parses_to_a_learned_rate_that_starts_at_zero():
    spec = parse_spec(_arms())
    assert spec.learns_forgetting and spec.forgetting_floor is None
    assert spec.temporal == "forgetting" and spec.forgetting_eps == 0.0
    fixed = parse_spec(_arms(0.02))
    assert not fixed.learns_forgetting and fixed.forgetting_eps == 0.02


@pytest.mark.parametrize("bad", ["sometimes", "", 0.0, 1.0])
def test_a_bad_floor_names_its_key(bad):
    with pytest.raises(SpecError) as err:
        parse_spec(_arms(bad))
    assert err.value.key == "forgetting_floor"


def test_the_strategy_forgets_at_the_rate_its_data_show():
    s = make_strategy(_arms())
    assert s.forgetting == 0.0
    _run(s, 40)
    idx = s.gp.X_[:, 0].astype(int)
    K = np.asarray(parse_spec(_arms()).kernel.matrix)[np.ix_(idx, idx)]
    expected = fit_forgetting(K, s.gp.y_, s.gp.times_, NOISE)
    assert s.forgetting == expected > 0.0
    assert s.gp.temporal.eps == expected


def test_learned_rate_round_trips_exactly_and_the_restored_strategy_continues_identically():
    s = make_strategy(_arms())
    _run(s, 25)
    state = json.loads(json.dumps(s.state_dict()))
    assert state["forgetting"] == s.forgetting > 0.0
    b = make_strategy(_arms())
    b.load_state_dict(state)
    assert b.forgetting == s.forgetting
    for t in range(26, 46):
        np.testing.assert_array_equal(b.ask(), s.ask())
        arm = int(s.ask()[0])
        ra, rb = (x.tell(np.array([arm]), _drifting(t, arm)) for x in (s, b))
        assert ra == rb
    assert b.forgetting == s.forgetting


def test_a_state_written_under_a_fixed_floor_learns_the_rate_from_its_data_at_load():
    fixed = make_strategy(_arms(0.02))
    _run(fixed, 25)
    state = fixed.state_dict()
    assert "forgetting" not in state
    learned = make_strategy(_arms())
    learned.load_state_dict(state)
    reference = make_strategy(_arms())
    reference.load_state_dict({**state, "forgetting": 0.0})
    reference._learn_forgetting()
    assert learned.forgetting == reference.forgetting
    np.testing.assert_array_equal(learned.ask(), reference.ask())


@pytest.mark.parametrize("bad", [-0.1, 1.0, "fast"])
def test_a_state_with_a_bad_rate_is_refused_and_changes_nothing(bad):
    from tvbod.core.errors import StateError

    s = make_strategy(_arms())
    _run(s, 10)
    state = s.state_dict()
    b = make_strategy(_arms())
    with pytest.raises(StateError):
        b.load_state_dict({**state, "forgetting": bad})
    assert b.t == 1 and b.forgetting == 0.0
