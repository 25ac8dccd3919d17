"""Covariance functions: spatial kernels on internal coordinates and temporal factors on steps.

Spatial kernels take `(n, d)` arrays and return `(na, nb)` matrices; stationary ones also give the
gradient of `k(a, b)` with respect to `a` for the box optimizer, as the full `(na, nb, d)` array
(`grad`) or as the scalar field `g` of `dk/da_i = g_ij (a_i - b_j) / l^2` (`grad_factor`). A
time-varying GP multiplies a spatial kernel by a temporal factor `k_T(t, t')` (TV-GP-UCB, UI-TVBO).
"""

from __future__ import annotations

import numpy as np

_SQRT5 = np.sqrt(5.0)


def _centered(a: np.ndarray, b: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """`a - b_0`, `b - b_0` in `dtype`: distances are unchanged, and the norms in
    `|a|^2 + |b|^2 - 2 a.b` stay at the scale of the distances (no cancellation far from the origin).
    """
    c = b[:1] if len(b) else a[:1]
    return (a - c).astype(dtype, copy=False), (b - c).astype(dtype, copy=False)


def _scaled_sqdist(a: np.ndarray, b: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Squared distances `|a_i - b_j|^2`, `(na, nb)`, via `|a|^2 + |b|^2 - 2 a.b`, clipped at 0."""
    a, b = _centered(a, b, dtype)
    d2 = np.einsum("ij,ij->i", a, a)[:, None] + np.einsum("ij,ij->i", b, b)[None, :]
    d2 -= 2.0 * (a @ b.T)
    np.maximum(d2, 0.0, out=d2)
    return d2


class _Stationary:
    """Shared parameters of the stationary kernels: per-dimension lengthscales and signal variance."""

    stationary = True

    def __init__(self, lengthscales, variance: float = 1.0) -> None:
        self.lengthscales = np.atleast_1d(np.asarray(lengthscales, dtype=float))
        self.variance = float(variance)

    def diag(self, a: np.ndarray) -> np.ndarray:
        """`k(a_i, a_i) = variance`, `(na,)`."""
        return np.full(len(a), self.variance)

    def with_lengthscales(self, lengthscales) -> "_Stationary":
        return type(self)(lengthscales, self.variance)

    def __call__(self, a: np.ndarray, b: np.ndarray, dtype=np.float64) -> np.ndarray:
        ls = self.lengthscales
        return self._from_sqdist(_scaled_sqdist(a / ls, b / ls, dtype))

    def _diff(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`(a_i - b_j) / l^2`, `(na, nb, d)`."""
        return (a[:, None, :] - b[None, :, :]) / self.lengthscales**2

    def grad(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(k, dk/da)` with shapes `(na, nb)` and `(na, nb, d)`."""
        k, g = self.grad_factor(a, b)
        return k, g[:, :, None] * self._diff(a, b)


class SquaredExponential(_Stationary):
    """`k(a, b) = s^2 exp(-|a - b|^2_L / 2)` with `|v|^2_L = sum_i (v_i / l_i)^2`."""

    def __call__(self, a: np.ndarray, b: np.ndarray, dtype=np.float64) -> np.ndarray:
        # exp(a.b - |a|^2/2 - |b|^2/2) on scaled inputs, built in place in one (na, nb) buffer.
        ls = self.lengthscales
        a, b = _centered(a / ls, b / ls, dtype)
        e = a @ b.T
        e -= 0.5 * np.einsum("ij,ij->i", a, a)[:, None]
        e -= 0.5 * np.einsum("ij,ij->i", b, b)[None, :]
        np.minimum(e, 0.0, out=e)  # -|a - b|^2 / 2 <= 0 despite round-off
        np.exp(e, out=e)
        if self.variance != 1.0:
            e *= self.variance
        return e

    def _from_sqdist(self, d2: np.ndarray) -> np.ndarray:
        d2 *= -0.5
        return self.variance * np.exp(d2, out=d2)

    def grad_factor(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(k, g)`, both `(na, nb)`, with `dk/da_i = g_ij (a_i - b_j) / l^2`: `g = -k`."""
        k = self(a, b)
        return k, -k


class Matern52(_Stationary):
    """`k(a, b) = s^2 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)`, `r = |a - b|_L`."""

    def _from_sqdist(self, d2: np.ndarray) -> np.ndarray:
        r = np.sqrt(d2)
        return self.variance * (1.0 + _SQRT5 * r + (5.0 / 3.0) * d2) * np.exp(-_SQRT5 * r)

    def grad_factor(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(k, g)` with `dk/da_i = g_ij (a_i - b_j) / l^2`: `dk/dr * dr/da` gives
        `g = -5/3 s^2 (1 + sqrt5 r) exp(-sqrt5 r)`."""
        ls = self.lengthscales
        d2 = _scaled_sqdist(a / ls, b / ls)
        r = np.sqrt(d2)
        e = np.exp(-_SQRT5 * r)
        k = self.variance * (1.0 + _SQRT5 * r + (5.0 / 3.0) * d2) * e
        g = -(5.0 / 3.0) * self.variance * (1.0 + _SQRT5 * r) * e
        return k, g


class MatrixKernel:
    """A fixed covariance matrix over the `m` points of a finite domain; inputs are indices `(n, 1)`.

    Used for arms with an empirical covariance (the paper's temperature benchmark) and for a points
    domain, whose stationary Gram matrix is computed once.
    """

    stationary = False

    def __init__(self, matrix) -> None:
        self.matrix = np.asarray(matrix, dtype=float)

    @staticmethod
    def _idx(a: np.ndarray) -> np.ndarray:
        return np.asarray(a).reshape(-1).astype(np.intp)

    def __call__(self, a: np.ndarray, b: np.ndarray, dtype=np.float64) -> np.ndarray:
        # Two takes copy the same entries as `matrix[np.ix_(ia, ib)]`, ~2x faster for tall blocks.
        block = self.matrix.take(self._idx(a), axis=0).take(self._idx(b), axis=1)
        return block.astype(dtype, copy=False)

    def diag(self, a: np.ndarray) -> np.ndarray:
        return np.diagonal(self.matrix)[self._idx(a)].copy()


def empirical_covariance(samples, *, standardize: bool = False,
                         decimals: int | None = None) -> np.ndarray:
    """Kernel over arms from samples `(m, n)` (row = arm, column = sample): `K = np.cov(rows)`
    `(m, m)` (ddof 1), symmetrized (the ET-GP-UCB temperature experiment's kernel).

    `standardize`: first map every value by the global mean and std (ddof 0) of the array;
    `decimals`: round the result (the daemon rounds to 12 so that a plant's fingerprint does not
    depend on BLAS round-off; the temperature bench uses it unrounded on standardized data)."""
    a = np.asarray(samples, dtype=float)
    if standardize:
        a = (a - a.mean()) / a.std()
    K = np.atleast_2d(np.cov(a))
    K = 0.5 * (K + K.T)
    return K if decimals is None else np.round(K, decimals)


class _TemporalFactor:
    """A temporal factor `k_T(t, t')` on steps: its formula is written once, in `_between` (on
    broadcast arrays); `__call__` is the `(na, nb)` matrix, `diag` the values `k_T(t, t)`."""

    def __call__(self, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
        ta, tb = _steps(ta), _steps(tb)
        return self._between(ta[:, None], tb[None, :])

    def diag(self, t: np.ndarray) -> np.ndarray:
        t = _steps(t)
        return self._between(t, t)


def _steps(t) -> np.ndarray:
    return np.asarray(t, dtype=float).reshape(-1)


class ForgettingFactor(_TemporalFactor):
    """TV-GP-UCB's temporal factor (Bogunovic et al. 2016): `k_T(t, t') = (1 - eps)^(|t - t'| / 2)`."""

    name = "forgetting"
    #: The factor between a past point and the query changes as the query time moves on.
    query_invariant = False

    def __init__(self, eps: float) -> None:
        self.eps = float(eps)

    def _between(self, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
        return np.power(1.0 - self.eps, 0.5 * np.abs(ta - tb))


class WienerDrift(_TemporalFactor):
    """UI-TVBO's temporal factor (Brunzema et al. 2022): `k_T(t, t') = 1 + sigma_w^2 min(t, t')`.

    For a query at a time later than every data point, `min(t, t_i) = t_i`: the cross-covariance
    with past data does not change as time moves on (only the prior variance grows).
    """

    name = "drift"
    query_invariant = True

    def __init__(self, sigma_w2: float) -> None:
        self.sigma_w2 = float(sigma_w2)

    def _between(self, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
        return 1.0 + self.sigma_w2 * np.minimum(ta, tb)
