"""The GP posterior on a fixed finite query set (a points or arms domain), kept up to date as the
dataset grows: `O(n m)` work per append instead of `O(n^2 m)` per prediction.

Valid when the cross-covariance between a past observation and a later query does not depend on
the query time (no temporal factor, or `temporal.query_invariant`); otherwise each prediction is
recomputed by `ExactGP.predict` (cached per query time).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular


class QuerySetPosterior:
    """`V = L^{-1} k(X, Zq)` row by row, the mean `V^T (L^{-1} y)` and the explained variance
    `sum_i V_i^2`, for the `ExactGP` that owns it (passed in by every call)."""

    def __init__(self, Zq: np.ndarray) -> None:
        self.Z = np.asarray(Zq, dtype=float)
        self.reset()

    @staticmethod
    def _incremental(gp) -> bool:
        return gp.temporal is None or getattr(gp.temporal, "query_invariant", False)

    @staticmethod
    def _past_factor(gp, t: np.ndarray) -> np.ndarray:
        if gp.temporal is None:
            return np.ones(len(t))
        return gp.temporal.diag(t)  # drift: 1 + sigma_w^2 min(t_i, T) = 1 + sigma_w^2 t_i

    def reset(self) -> None:
        """The prior: no rows (the owner's dataset was emptied)."""
        m = len(self.Z)
        self._V = np.empty((0, m))
        self._mean = np.zeros(m)
        self._explained = np.zeros(m)
        self._time = None
        self._time_result = None

    def rebuild(self, gp) -> None:
        """From `gp`'s full factor (after a fit or refactorization)."""
        self.reset()
        if gp.n == 0 or not self._incremental(gp):
            return
        kq = gp.kernel(gp.X_, self.Z) * self._past_factor(gp, gp.times_)[:, None]
        V = solve_triangular(gp.L_, kq, lower=True, check_finite=False)
        self._V = np.empty((max(2 * gp.n, 16), V.shape[1]))
        self._V[: gp.n] = V
        self._mean = V.T @ gp.v_
        self._explained = np.einsum("ij,ij->j", V, V)

    def append(self, gp, x, tx, l, d, v_new) -> None:
        """One appended observation `x` at `tx`: the factor's new row `[l^T, d]`, `v_new`."""
        if not self._incremental(gp):
            self._time = None
            return
        n = gp.n - 1  # rows held before this append
        k_new = gp.kernel(x, self.Z)[0] * self._past_factor(gp, tx)[0]
        row = (k_new - l @ self._V[:n]) / d
        if n >= len(self._V):
            grown = np.empty((max(2 * n, 16), self._V.shape[1]))
            grown[:n] = self._V[:n]
            self._V = grown
        self._V[n] = row
        self._mean = self._mean + row * v_new
        self._explained = self._explained + row * row

    def predict(self, gp, t_query: float) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance on the query set at time `t_query`."""
        if not self._incremental(gp):
            if self._time != t_query:
                self._time_result = gp.predict(self.Z, t_query)
                self._time = t_query
            return self._time_result
        prior = gp.prior_variance(self.Z, np.array([float(t_query)]))
        return self._mean.copy(), np.maximum(prior - self._explained, 0.0)
