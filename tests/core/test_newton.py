"""The Newton polish (`budget.polish: newton`): its posterior and acquisition Hessians against finite
differences of the tested gradients, and the polish against dense grids and tight L-BFGS-B on known
functions, inside the box and at its bounds."""

import numpy as np
import pytest
from scipy.optimize import minimize

from tvbod.core import newton
from tvbod.core.acquisition import EI, UCB
from tvbod.core.gp import ExactGP, predict_with_grad
from tvbod.core.kernels import ForgettingFactor, Matern52, SquaredExponential
from tvbod.core.behaviours import LEGACY_TOLERANCE
from tvbod.core.optimize import POLISHES, Budget, maximize_on_box, sobol_unit

H = 1e-5  # central-difference step (the gradients are smooth at the scale of the lengthscales)


def _gp(kernel, d: int, n: int = 25, temporal=None, seed: int = 0) -> ExactGP:
    rng = np.random.default_rng([seed, d, n])
    X = rng.random((n, d))
    y = np.sin(5.0 * X + np.arange(d)).sum(axis=1) + rng.normal(0.0, 0.1, n)
    gp = ExactGP(kernel, 0.01, temporal)
    gp.fit(X, y, np.arange(n, dtype=float))
    return gp


GPS = [
    ("se-1d", lambda: _gp(SquaredExponential([0.2]), 1)),
    ("se-3d", lambda: _gp(SquaredExponential([0.3, 0.4, 0.5]), 3)),
    ("matern-3d", lambda: _gp(Matern52([0.3, 0.4, 0.5], 1.5), 3)),
    ("se-2d-forgetting", lambda: _gp(SquaredExponential([0.3]), 2, temporal=ForgettingFactor(0.05))),
]


def _fd_jacobian(fn, X: np.ndarray) -> np.ndarray:
    """`d fn(X) / dX` `(m, k, d)` by central differences, for `fn: (m, d) -> (m, k)`."""
    d = X.shape[1]
    cols = []
    for i in range(d):
        e = np.zeros(d)
        e[i] = H
        cols.append((fn(X + e) - fn(X - e)) / (2 * H))
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("make", [g for _, g in GPS], ids=[n for n, _ in GPS])
def test_posterior_hessian_matches_predict_with_grad_and_its_finite_differences(make):
    gp = make()
    t = float(gp.n + 3)
    X = np.random.default_rng(1).random((6, gp.X_.shape[1]))
    mean, var, dmean, dvar, hmean, hvar = newton.posterior_hessian(gp, X, t)
    m2, v2, dm2, dv2 = predict_with_grad(gp, X, t)
    np.testing.assert_allclose(mean, m2, atol=1e-12)
    np.testing.assert_allclose(var, v2, atol=1e-12)
    np.testing.assert_allclose(dmean, dm2, atol=1e-10)
    np.testing.assert_allclose(dvar, dv2, atol=1e-10)
    fd_mean = _fd_jacobian(lambda Z: predict_with_grad(gp, Z, t)[2], X)
    fd_var = _fd_jacobian(lambda Z: predict_with_grad(gp, Z, t)[3], X)
    np.testing.assert_allclose(hmean, fd_mean, atol=1e-6 * np.abs(fd_mean).max())
    np.testing.assert_allclose(hvar, fd_var, atol=1e-6 * np.abs(fd_var).max())


@pytest.mark.parametrize("acq", [UCB(2.0), EI(best=1.0, xi=0.01)], ids=["ucb", "ei"])
def test_acquisition_gradient_and_hessian_match_finite_differences(acq):
    gp = _gp(SquaredExponential([0.3, 0.4, 0.5]), 3)
    X = np.random.default_rng(2).random((5, 3))

    def grad(Z):
        return newton.acquisition_hessian(acq, *newton.posterior_hessian(gp, Z, 0.0))[1]

    value, g, hess = newton.acquisition_hessian(acq, *newton.posterior_hessian(gp, X, 0.0))
    np.testing.assert_allclose(value, acq.score(*gp.predict(X, 0.0)), rtol=1e-12)
    np.testing.assert_allclose(g, acq.score_grad(*predict_with_grad(gp, X, 0.0))[1], atol=1e-12)
    fd = _fd_jacobian(grad, X)
    np.testing.assert_allclose(hess, fd, atol=1e-6 * np.abs(fd).max())


def _dense_max(gp, acq, lo, hi, points: int = 401):
    axes = [np.linspace(a, b, points) for a, b in zip(lo, hi)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(lo))
    score = acq.score(*gp.predict(grid, 0.0))
    return grid, score


def _tight_lbfgsb(gp, acq, z0, lo, hi) -> float:
    def neg(z):
        v, g = acq.score_grad(*predict_with_grad(gp, z[None, :], 0.0))
        return -float(v[0]), -g[0]

    res = minimize(neg, z0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                   options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-12})
    return float(acq.score(*gp.predict(np.clip(res.x, lo, hi)[None, :], 0.0))[0])


@pytest.mark.parametrize("acq", [UCB(1.5), EI(best=1.2, xi=0.0)], ids=["ucb", "ei"])
def test_newton_polish_reaches_the_dense_grid_and_tight_lbfgsb_maxima(acq):
    gp = _gp(SquaredExponential([0.25, 0.35]), 2, n=15)
    lo, hi = np.zeros(2), np.ones(2)
    grid, score = _dense_max(gp, acq, lo, hi)
    starts = grid[np.argsort(-score)[::4000][:5]]  # spread over the ranking: several hills
    points, mean, var = newton.newton_polish(gp, 0.0, acq, starts, lo, hi, 50)
    ends = points[5:]
    values = acq.score(mean, var)
    np.testing.assert_allclose(values, acq.score(*gp.predict(points, 0.0)), rtol=1e-12)
    assert np.all(values[5:] >= values[:5])  # every polished end at least its start
    assert values.max() >= score.max() - 1e-12  # at least the 160,801-point grid's best
    for z0, v in zip(starts, values[5:]):  # each start's hill climbed as far as tight L-BFGS-B
        assert v >= _tight_lbfgsb(gp, acq, z0, lo, hi) - 1e-10 or np.any(
            values[5:] > v)  # (or it stopped early below a better start: pruned or merged)
    assert np.all((ends >= lo) & (ends <= hi))


def test_newton_polish_stops_at_the_bounds_where_the_maximum_is():
    # the data rise along x0 and x1: on [0, 0.5] x [0, 0.3] the mean's maximum is the corner
    rng = np.random.default_rng(3)
    X = rng.random((30, 2))
    gp = ExactGP(SquaredExponential([0.6]), 0.01)
    gp.fit(X, 2.0 * X[:, 0] + X[:, 1], np.zeros(30))
    lo, hi = np.zeros(2), np.array([0.5, 0.3])
    acq = UCB(0.1)
    grid, score = _dense_max(gp, acq, lo, hi)
    starts = np.array([[0.1, 0.1], [0.3, 0.05], [0.45, 0.25]])
    points, mean, var = newton.newton_polish(gp, 0.0, acq, starts, lo, hi, 50)
    best = points[3 + int(np.argmax(acq.score(mean, var)[3:]))]
    np.testing.assert_array_equal(best, hi)  # exactly on both bounds
    assert acq.score(mean, var).max() >= score.max() - 1e-12


def test_newton_polish_is_deterministic_and_keeps_the_starts_first():
    gp = _gp(Matern52([0.3, 0.4, 0.5]), 3)
    acq = UCB(2.0)
    starts = np.random.default_rng(4).random((5, 3))
    a = newton.newton_polish(gp, 0.0, acq, starts, np.zeros(3), np.ones(3), 50)
    b = newton.newton_polish(gp, 0.0, acq, starts.copy(), np.zeros(3), np.ones(3), 50)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a[0][:5], starts)
    one = newton.newton_polish(gp, 0.0, acq, starts, np.zeros(3), np.ones(3), 1)
    assert acq.score(one[1], one[2]).max() <= acq.score(a[1], a[2]).max() + 1e-15


@pytest.mark.parametrize("d", [2, 4])
def test_the_newton_ask_reaches_at_least_the_lbfgsb_asks_value(d):
    """Both polished to round-off (each polish's tolerance before `budget.tolerance` existed)."""
    gp = _gp(SquaredExponential([0.2 * np.sqrt(d)]), d, n=120)
    lo, hi = np.zeros(d), np.ones(d)
    unit = sobol_unit(d, 1024, 0)
    worse = []
    for k in range(6):
        shift = np.random.default_rng(k).random(d)
        acq = UCB(2.0 + 0.1 * k)
        tight = {p: Budget(polish=p, tolerance=LEGACY_TOLERANCE[p]) for p in POLISHES}
        _, new = maximize_on_box(gp, 0.0, acq, lo, hi, unit, shift, tight["newton"])
        _, old = maximize_on_box(gp, 0.0, acq, lo, hi, unit, shift, tight["lbfgsb-joint"])
        worse.append(old - new)
    assert max(worse) <= 1e-9 * 3.0
