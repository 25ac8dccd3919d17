"""A-GP-UCB's estimators (`tvbod.core.agpucb`) against dense posteriors computed without a Cholesky
factor, and their use by the strategy."""

import math

import numpy as np
import pytest

from tvbod.core import make_strategy
from tvbod.core.acquisition import beta_t
from tvbod.core.agpucb import EstimatorData, regret_estimate
from tvbod.core.exploration import AGPUCBScaling, FixedBeta, bound_regret_estimate, norm_growth
from tvbod.core.kernels import SquaredExponential, WienerDrift

NOISE = 0.01


def _data(temporal=None, n=12, d=2):
    rng = np.random.default_rng(4)
    X = rng.random((n, d))
    return EstimatorData(X, np.sin(4 * X).sum(1), np.arange(1.0, n + 1), SquaredExponential([0.4, 0.6]),
                         temporal, NOISE, rng.random((50, d)))


def _scaling(estimator):
    g = AGPUCBScaling([0.4, 0.6], 0.5, estimator=estimator, base=FixedBeta(0.4, 4.0))
    g.tau_ = 12
    g.theta_map_ = np.array([0.3, 0.9])
    return g


def _dense(data, h, g, temporal=True):
    """K of the data under the scaled lengthscales (with the temporal factor if asked)."""
    kern = data.kernel.with_lengthscales(g.lengthscales(h))
    K = kern(data.X, data.X)
    if temporal and data.temporal is not None:
        K = K * data.temporal(data.times, data.times)
    return kern, K


@pytest.mark.parametrize("temporal", [None, WienerDrift(0.03)], ids=["static", "drift"])
def test_one_step_estimate_equals_sequential_dense_conditioning(temporal):
    data, g = _data(temporal), _scaling("one-step")
    est = regret_estimate(g, data, 12)
    n, d = data.X.shape
    for h in (1.0, 2.5):
        _, K = _dense(data, h, g)
        total = 0.0
        for j in range(n):  # variance of f(x_j) given x_1..x_{j-1}, by a dense solve
            k = K[:j, j]
            var = K[j, j] - (k @ np.linalg.solve(K[:j, :j] + NOISE * np.eye(j), k) if j else 0.0)
            sqrt_beta = math.sqrt(beta_t(int(data.times[j]), 0.4, 4.0))
            total += 2 * (sqrt_beta + norm_growth(j + 1) * 0.5 * h ** (d / 2)) * math.sqrt(max(var, 0))
        assert est(h) == pytest.approx(total, rel=1e-9)


def test_sigma_floor_estimate_is_the_std_at_the_dense_ucb_maximizer():
    data, g = _data(WienerDrift(0.03)), _scaling("sigma-floor")  # the spatial kernel only
    est = regret_estimate(g, data, 12)
    for h in (1.0, 3.0):
        kern, K = _dense(data, h, g, temporal=False)
        A = K + NOISE * np.eye(len(K))
        kq = kern(data.candidates, data.X)
        mean = kq @ np.linalg.solve(A, data.y)
        sd = np.sqrt(np.maximum(kern.diag(data.candidates)
                                - np.einsum("ij,ji->i", kq, np.linalg.solve(A, kq.T)), 0))
        i = int(np.argmax(mean + (math.sqrt(beta_t(13, 0.4, 4.0)) + g.norm_term(h)) * sd))
        assert est(h) == pytest.approx(sd[i], rel=1e-9, abs=1e-12)


def test_bound_estimate_needs_no_posterior():
    data, g = _data(), _scaling("bound")
    assert regret_estimate(g, data, 12)(2.0) == bound_regret_estimate(2.0, 12, 2, 0.5, 1.0)


def test_strategy_lengthscales_follow_the_estimated_scaling():
    spec = {"domain": {"lower": [0.0, 0.0], "upper": [1.0, 1.0]}, "seed": 2, "noise_variance": 0.01,
            "budget": {"candidates": 64}, "kernel": {"lengthscales": 1.0},
            "exploration": {"type": "agpucb", "norm_bound": 0.01}}  # one-step estimator
    s = make_strategy(spec)
    for _ in range(8):
        x = s.ask()
        s.tell(x, float(np.sin(5 * x[0]) * np.cos(3 * x[1])))
    g = s.exploration
    assert s.lengthscales is not None and g.h_ > 1.0  # settled: h advanced with the data
    assert np.array_equal(s.lengthscales, g.lengthscales())
    assert s.kappa == pytest.approx(math.sqrt(beta_t(9, 0.4, 4.0)) + g.norm_term(), rel=1e-15)
