"""The GP posterior against a direct dense solve; incremental Cholesky against a refactorization."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from tvbod.core.errors import NumericalError
from tvbod.core.gp import ExactGP, predict_with_grad
from tvbod.core.screen import Float32Screen
from tvbod.core.kernels import ForgettingFactor, Matern52, MatrixKernel, SquaredExponential, WienerDrift

NOISE = 0.05


def _data(n=25, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    return X, np.sin(3 * X).sum(1) + 0.1 * rng.standard_normal(n), np.arange(1.0, n + 1)


def _dense_posterior(kernel, temporal, X, y, times, Xq, tq):
    """RW2006 eq. 2.25/2.26 by a dense solve, no Cholesky."""
    K = kernel(X, X)
    kq = kernel(Xq, X)
    kss = kernel.diag(Xq)
    if temporal is not None:
        K = K * temporal(times, times)
        kq = kq * temporal([tq], times)
        kss = kss * temporal.diag(np.full(len(Xq), tq))
    A = K + NOISE * np.eye(len(X))
    mean = kq @ np.linalg.solve(A, y)
    var = kss - np.einsum("ij,ji->i", kq, np.linalg.solve(A, kq.T))
    return mean, var


TEMPORALS = [None, ForgettingFactor(0.05), WienerDrift(0.03)]


@pytest.mark.parametrize("temporal", TEMPORALS, ids=["static", "forgetting", "drift"])
@pytest.mark.parametrize("kernel", [SquaredExponential([0.3, 0.5]), Matern52([0.4])], ids=["se", "m52"])
def test_posterior_equals_direct_dense_solve(kernel, temporal):
    X, y, times = _data()
    gp = ExactGP(kernel, NOISE, temporal)
    for x, yi, t in zip(X, y, times):
        gp.append(x, yi, t)
    Xq = np.random.default_rng(5).random((30, 2))
    mean, var = gp.predict(Xq, 27.0)
    m_ref, v_ref = _dense_posterior(kernel, temporal, X, y, times, Xq, 27.0)
    np.testing.assert_allclose(mean, m_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, v_ref, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("temporal", TEMPORALS, ids=["static", "forgetting", "drift"])
def test_incremental_cholesky_equals_full_refactorization(temporal):
    X, y, times = _data(60, 3)
    inc = ExactGP(SquaredExponential([0.4, 0.4, 0.4]), NOISE, temporal)
    for x, yi, t in zip(X, y, times):
        inc.append(x, yi, t)
    full = ExactGP(SquaredExponential([0.4, 0.4, 0.4]), NOISE, temporal)
    full.fit(X, y, times)
    np.testing.assert_allclose(inc.L_, full.L_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(inc.alpha_, full.alpha_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("temporal", [None, ForgettingFactor(0.05)], ids=["static", "forgetting"])
@pytest.mark.parametrize("kernel", [SquaredExponential([0.3, 0.5]), Matern52([0.4, 0.3])], ids=["se", "m52"])
def test_mean_and_variance_gradients_match_finite_differences(kernel, temporal):
    X, y, times = _data(15)
    gp = ExactGP(kernel, NOISE, temporal)
    gp.fit(X, y, times)
    Xq = np.random.default_rng(7).random((5, 2))
    _, _, dmean, dvar = predict_with_grad(gp, Xq, 16.0)
    for i, x in enumerate(Xq):
        fd_m = approx_fprime(x, lambda z: gp.predict(z[None, :], 16.0)[0][0], 1e-7)
        fd_v = approx_fprime(x, lambda z: gp.predict(z[None, :], 16.0)[1][0], 1e-7)
        np.testing.assert_allclose(dmean[i], fd_m, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(dvar[i], fd_v, rtol=1e-4, atol=1e-6)


def test_predict_with_grad_values_equal_predict():
    X, y, times = _data(20)
    gp = ExactGP(SquaredExponential([0.3]), NOISE)
    gp.fit(X, y, times)
    Xq = np.random.default_rng(8).random((7, 2))
    m, v, _, _ = predict_with_grad(gp, Xq)
    m2, v2 = gp.predict(Xq)
    np.testing.assert_allclose(m, m2, rtol=1e-12)
    np.testing.assert_allclose(v, v2, rtol=1e-10, atol=1e-14)


def test_float32_screen_prediction_is_close_to_exact():
    X, y, times = _data(100)
    gp = ExactGP(SquaredExponential([0.3]), NOISE)
    gp.fit(X, y, times)
    Xq = np.random.default_rng(9).random((500, 2))
    m, v = gp.predict(Xq)
    ms, vs = Float32Screen().predict(gp, Xq)
    np.testing.assert_allclose(ms, m, atol=1e-3)
    np.testing.assert_allclose(vs, v, atol=1e-3)


@pytest.mark.parametrize("temporal", TEMPORALS, ids=["static", "forgetting", "drift"])
def test_query_set_cache_equals_direct_prediction(temporal):
    rng = np.random.default_rng(3)
    P = rng.random((80, 2))
    kernel = MatrixKernel(SquaredExponential([0.25])(P, P))
    gp = ExactGP(kernel, NOISE, temporal)
    gp.attach_query_set(np.arange(80.0)[:, None])
    for t in range(1, 31):
        i = rng.integers(80)
        gp.append(np.array([float(i)]), float(np.sin(5 * P[i, 0])), float(t))
        if t == 20:
            gp.reset()
    m, v = gp.predict_query_set(32.0)
    m_ref, v_ref = gp.predict(np.arange(80.0)[:, None], 32.0)
    np.testing.assert_allclose(m, m_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(v, v_ref, rtol=1e-8, atol=1e-11)


def test_variance_is_never_negative_at_data_points():
    X, y, times = _data(30)
    gp = ExactGP(SquaredExponential([0.5]), 1e-8)
    gp.fit(X, y, times)
    assert np.all(gp.predict(X)[1] >= 0)


def test_duplicate_points_with_tiny_noise_factor_with_jitter():
    gp = ExactGP(SquaredExponential([0.3]), 1e-12)
    x = np.array([0.5])
    for t in range(1, 6):
        gp.append(x, 1.0, float(t))
    assert gp.n == 5
    assert np.all(np.isfinite(gp.L_))
    mean, _ = gp.predict(x[None, :])
    assert mean[0] == pytest.approx(1.0, abs=1e-3)


def test_unfactorizable_matrix_raises_numerical_error_with_hint():
    class Broken:
        def __call__(self, a, b, dtype=np.float64):
            return -np.ones((len(a), len(b)))

        def diag(self, a):
            return -np.ones(len(a))

    gp = ExactGP(Broken(), 1e-6)
    with pytest.raises(NumericalError, match="jitter"):
        gp.fit(np.zeros((3, 1)), np.zeros(3), np.arange(3.0))


def test_state_round_trip_rebuilds_bit_identical_factor():
    X, y, times = _data(40)
    gp = ExactGP(SquaredExponential([0.3]), NOISE)
    for x, yi, t in zip(X, y, times):
        gp.append(x, yi, t)
    gp.reset()
    for x, yi, t in zip(X[:12], y[:12], times[:12]):
        gp.append(x, yi, t)
    clone = ExactGP(SquaredExponential([0.3]), NOISE)
    clone.load_state_dict(gp.state_dict())
    np.testing.assert_array_equal(clone.L_, gp.L_)
    np.testing.assert_array_equal(clone.v_, gp.v_)


def test_reset_empties_the_dataset_and_restores_the_prior():
    X, y, times = _data(10)
    gp = ExactGP(SquaredExponential([0.3], 2.0), NOISE)
    gp.fit(X, y, times)
    gp.reset()
    mean, var = gp.predict(X[:3])
    assert gp.n == 0
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_array_equal(var, 2.0)


@pytest.mark.parametrize("temporal", TEMPORALS, ids=["static", "forgetting", "drift"])
def test_one_step_variances_equal_sequential_dense_conditioning(temporal):
    X, y, times = _data(n=15)
    gp = ExactGP(SquaredExponential([0.3, 0.5]), NOISE, temporal)
    gp.fit(X[:5], y[:5], times[:5])
    for i in range(5, 15):
        gp.append(X[i], y[i], times[i])
    for j in range(15):  # the posterior variance at x_j given x_1..x_{j-1}, at x_j's own time
        want = _dense_posterior(gp.kernel, temporal, X[:j], y[:j], times[:j], X[j:j + 1], times[j])[1]
        assert gp.one_step_variances()[j] == pytest.approx(want[0], rel=1e-8, abs=1e-12)
