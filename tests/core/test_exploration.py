"""Exploration state objects and the issue-6 acquisition pieces, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tvbod.core import acquisition as acq
from tvbod.core import exploration as ex


def _adaptive(**kw):
    args = dict(kappa0=1.0, lambda0=0.1, kappa_min=0.1, kappa_max=10.0, lambda_max=1.0,
                kappa_rate=0.1, lambda_rate=0.05, eta=0.1)
    args.update(kw)
    return ex.AdaptiveKappaLambda(**args)


def test_kappa_update_matches_hand_computed_values():
    a = _adaptive()
    a.update_kappa(0.2)  # first surprise only starts the average (Deltabar_0 = 0 read as "none")
    assert a.kappa_ == 1.0 and a.delta_bar_ == 0.2
    a.update_kappa(0.4)  # kappa = 1 * exp(0.1 * (0.4 - 0.2) / 0.2) = e^0.1
    assert a.kappa_ == pytest.approx(math.exp(0.1))
    assert a.delta_bar_ == pytest.approx(0.9 * 0.2 + 0.1 * 0.4)
    a.update_kappa(0.11)  # ratio (0.11 - 0.22) / 0.22 = -0.5
    assert a.kappa_ == pytest.approx(math.exp(0.1) * math.exp(-0.05))


def test_lambda_update_matches_hand_computed_values():
    a = _adaptive()
    a.update_lambda(0.5)
    assert a.lambda_ == 0.1 and a.i_bar_ == 0.5
    a.update_lambda(0.25)  # lambda = 0.1 (1 + 0.05 * (0.25 - 0.5) / 0.5) = 0.0975
    assert a.lambda_ == pytest.approx(0.0975)
    assert a.i_bar_ == pytest.approx(0.475)


def test_bounds_are_respected():
    a = _adaptive(kappa_max=1.5, lambda_max=0.12)
    a.update_kappa(1e-3)
    for _ in range(50):
        a.update_kappa(100.0)
        assert 0.1 <= a.kappa_ <= 1.5
    assert a.kappa_ == 1.5
    b = _adaptive(kappa_min=0.5)
    b.update_kappa(10.0)
    for _ in range(200):
        b.update_kappa(1e-6)
    assert b.kappa_ == 0.5
    c = _adaptive(lambda_max=0.12, lambda_rate=5.0)
    c.update_lambda(0.1)
    c.update_lambda(10.0)
    assert c.lambda_ == 0.12
    c.update_lambda(1e-9)  # 1 + 5 * (tiny - avg)/avg < 0: clipped at 0
    assert c.lambda_ == 0.0


def test_zero_average_skips_the_update():
    a = _adaptive()
    a.update_kappa(0.0)
    a.update_kappa(5.0)  # Deltabar = 0 (a perfect fit): no division, kappa unchanged
    assert a.kappa_ == 1.0


def test_reset_keeps_kappa_lambda_and_forgets_averages():
    a = _adaptive()
    for d in (0.1, 0.3, 0.2):
        a.update_kappa(d)
        a.update_lambda(d)
    k, lam = a.kappa_, a.lambda_
    a.on_reset()
    assert (a.kappa_, a.lambda_, a.delta_bar_, a.i_bar_) == (k, lam, None, None)


def test_state_round_trip_is_exact():
    a = _adaptive()
    for d in (0.1, 0.37, 0.2):
        a.update_kappa(d)
        a.update_lambda(d * 2)
    b = _adaptive()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    g = ex.AGPUCBScaling([0.3, 0.5], 2.0)
    g.advance(lambda h: h)
    g2 = ex.AGPUCBScaling([0.3, 0.5], 2.0)
    g2.load_state_dict(g.state_dict())
    assert g2.state_dict() == g.state_dict()


# ---------------------------------------------------------------------- A-GP-UCB
def test_scaling_rules_are_elementwise():
    theta_map = np.array([0.05, 0.5, 2.0])
    theta0 = np.array([1.0, 1.0, 1.0])
    assert ex.scaled_lengthscales(theta_map, theta0, 4.0, "min").tolist() == [0.05, 0.25, 0.25]
    assert ex.scaled_lengthscales(theta_map, theta0, 4.0, "divide").tolist() == [0.0125, 0.125, 0.5]


def test_line_search_matches_the_reference_on_a_constructed_case():
    # estimate(h) = c h^2 reaches p(t) = t^0.9 at h = sqrt(t^0.9 / c)
    g = ex.AGPUCBScaling([1.0], 1.0, exponent=0.9, h_max=1e3)
    c = 0.5
    hs = []
    for t in range(1, 30):
        hs.append(g.advance(lambda h: c * h**2))
        expected = max(math.sqrt(t**0.9 / c), 1.0)
        assert hs[-1] == pytest.approx(expected, rel=1e-9)
        assert c * hs[-1] ** 2 == pytest.approx(t**0.9, rel=1e-9)
    assert all(b >= a for a, b in zip(hs, hs[1:]))


def test_h_is_non_decreasing_even_when_the_estimate_grows():
    g = ex.AGPUCBScaling([1.0], 1.0, h_max=50.0)
    hs = [g.advance(lambda h, t=t: h * (5.0 if t % 3 == 0 else 0.5)) for t in range(1, 40)]
    assert all(b >= a for a, b in zip(hs, hs[1:]))
    assert hs[-1] <= 50.0


def test_bound_estimate_line_search_against_closed_form():
    # d = 1: R(h) = C b(t) h^(1/2) B0 sqrt(t h ln(1+t)^2) = C b B0 h sqrt(t) ln(1+t)
    t, B0 = 7, 0.25
    g = ex.AGPUCBScaling([1.0], B0, estimator="bound", h_max=1e6)
    g.tau_ = t - 1
    h = g.advance(lambda h: ex.bound_regret_estimate(h, g.tau_, 1, B0))
    closed = t**0.9 / (ex.norm_growth(t) * B0 * math.sqrt(t) * math.log1p(t))
    assert h == pytest.approx(max(closed, 1.0), rel=1e-9)


def test_agpucb_reset_restarts_the_clock_and_scaling():
    g = ex.AGPUCBScaling([1.0], 1.0)
    for _ in range(5):
        g.advance(lambda h: 0.1 * h)
    assert g.h_ > 1 and g.tau_ == 5
    g.theta_map_ = np.array([0.7])
    g.on_reset()
    assert (g.h_, g.tau_, g.theta_map_.tolist()) == (1.0, 0, [0.7])


# ---------------------------------------------------------------------- acquisition pieces
def test_hessian_fd_matches_an_analytic_quadratic():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    H = A + A.T
    b = rng.standard_normal(3)
    f = lambda X: 0.5 * np.einsum("ij,jk,ik->i", X, H, X) + X @ b + 1.0  # noqa: E731
    X = rng.random((4, 3))
    Hfd = acq.mean_hessian_fd(f, X)
    assert np.allclose(Hfd, H[None], atol=1e-5)
    C = acq.complexity_factor(Hfd)
    expected = np.maximum(np.abs(np.linalg.eigvalsh(H)), 1e-6).sum()
    assert np.allclose(C, expected, rtol=1e-6)


def test_complexity_factor_floors_flat_directions():
    assert acq.complexity_factor(np.zeros((2, 3, 3))).tolist() == [3e-6, 3e-6]


def test_hessian_fd_in_one_dimension():
    Hfd = acq.mean_hessian_fd(lambda X: 3.0 * X[:, 0] ** 2, np.array([[0.2], [0.7]]))
    assert np.allclose(Hfd[:, 0, 0], 6.0, atol=1e-5)


def test_penalized_ucb_formula():
    v = acq.penalized_ucb(np.array([1.0]), np.array([0.25]), np.array([2.0]), 2.0, 0.1)
    assert v[0] == pytest.approx(1.0 + 2.0 * 0.5 - 0.1 * 0.25 * 2.0)


@pytest.mark.parametrize("xi", [0.0, 0.05])
def test_ei_gradient_matches_finite_differences(xi):
    # Property: d EI/dx = Phi(z) dmu + phi(z) dsigma, checked with a smooth synthetic posterior.
    from scipy.optimize import approx_fprime

    def post(x):
        return np.array([np.sin(3 * x[0]) + x[1]]), np.array([0.1 + x[0] ** 2 * x[1] ** 2])

    def ei(x):
        return acq.expected_improvement(*post(x), best=0.4, xi=xi)[0]

    x = np.array([0.4, 0.6])
    m, v = post(x)
    dm = np.array([[3 * np.cos(3 * x[0]), 1.0]])
    dv = np.array([[2 * x[0] * x[1] ** 2, 2 * x[1] * x[0] ** 2]])
    val, grad = acq.expected_improvement_grad(m, v, dm, dv, 0.4, xi)
    assert val[0] == pytest.approx(ei(x))
    assert np.allclose(grad[0], approx_fprime(x, ei, 1e-7), atol=1e-5)


def test_ei_is_non_decreasing_in_the_variance_and_zero_sigma_safe():
    var = np.linspace(0.0, 2.0, 50)
    e = acq.expected_improvement(np.full(50, 0.1), var, best=0.3)
    assert np.all(np.diff(e) >= -1e-15) and e[0] == 0.0
