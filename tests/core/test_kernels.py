"""Kernels: closed forms, positive definiteness, and input gradients against finite differences."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from tvbod.core.kernels import ForgettingFactor, Matern52, MatrixKernel, SquaredExponential, WienerDrift

KERNELS = [SquaredExponential([0.3, 0.7, 0.5], 1.7), Matern52([0.3, 0.7, 0.5], 0.8)]


@pytest.mark.parametrize("kernel", KERNELS, ids=["se", "matern52"])
def test_input_gradient_matches_finite_differences(kernel):
    rng = np.random.default_rng(0)
    A, B = rng.random((4, 3)), rng.random((6, 3))
    _, dk = kernel.grad(A, B)
    for i in range(len(A)):
        for j in range(len(B)):
            fd = approx_fprime(A[i], lambda a: kernel(a[None, :], B[j : j + 1])[0, 0], 1e-7)
            np.testing.assert_allclose(dk[i, j], fd, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kernel", KERNELS, ids=["se", "matern52"])
def test_gram_matrix_is_symmetric_positive_definite(kernel):
    X = np.random.default_rng(1).random((40, 3))
    K = kernel(X, X)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    assert np.linalg.eigvalsh(K + 1e-9 * np.eye(40)).min() > 0
    np.testing.assert_allclose(np.diag(K), kernel.diag(X))


def test_squared_exponential_matches_closed_form():
    k = SquaredExponential([0.5, 2.0], 3.0)
    a, b = np.array([[0.1, 0.2]]), np.array([[0.4, -1.0]])
    expected = 3.0 * np.exp(-0.5 * ((0.3 / 0.5) ** 2 + (1.2 / 2.0) ** 2))
    assert k(a, b)[0, 0] == pytest.approx(expected, rel=1e-12)


def test_matern52_matches_closed_form():
    k = Matern52([0.5], 2.0)
    r = 0.35 / 0.5
    expected = 2.0 * (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)
    assert k(np.array([[0.0]]), np.array([[0.35]]))[0, 0] == pytest.approx(expected, rel=1e-12)


def test_float32_screening_kernel_is_close_to_float64():
    k = SquaredExponential([0.2, 0.2])
    X, Y = np.random.default_rng(2).random((50, 2)), np.random.default_rng(3).random((30, 2))
    np.testing.assert_allclose(k(X, Y, dtype=np.float32), k(X, Y), atol=1e-5)


def test_matrix_kernel_indexes_by_point_index():
    M = np.array([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]])
    k = MatrixKernel(M)
    a, b = np.array([[2.0], [0.0]]), np.array([[1.0], [2.0]])
    np.testing.assert_array_equal(k(a, b), [[0.2, 3.0], [0.5, 0.1]])
    np.testing.assert_array_equal(k.diag(a), [3.0, 2.0])


def test_forgetting_factor_is_bogunovic_time_kernel():
    f = ForgettingFactor(0.1)
    np.testing.assert_allclose(f([5.0], [1.0, 5.0, 7.0]), [[0.9**2, 1.0, 0.9**1]])


def test_wiener_drift_is_one_plus_variance_times_min_time():
    w = WienerDrift(0.03)
    np.testing.assert_allclose(w([4.0], [2.0, 9.0]), [[1 + 0.03 * 2, 1 + 0.03 * 4]])
    np.testing.assert_allclose(w.diag([10.0]), [1.3])
