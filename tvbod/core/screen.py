"""Float32 screening of many candidates under an `ExactGP`'s posterior: the ranking that picks the
few starts the float64 polish refines (`optimize.maximize_on_box`), ~3x faster than `predict`.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

#: Rows of the factor in the first block of `Float32Screen.best`'s blocked solve.
_SCREEN_BLOCK = 64


def _col_sq(V: np.ndarray) -> np.ndarray:
    """Column sums of squares, `(m,)` float64 from `(n, m)`."""
    return np.einsum("ij,ij->j", V, V).astype(float)


def _top(score: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest scores (in no particular order)."""
    if k >= len(score):
        return np.arange(len(score))
    return np.argpartition(-score, k - 1)[:k]


class Float32Screen:
    """The float32 copy of a GP's factor (cached until the factor changes: `invalidate`) and the
    screening predictions on it; the owning `ExactGP` is passed in by every call."""

    def __init__(self) -> None:
        self._L32 = None

    def invalidate(self) -> None:
        self._L32 = None

    def predict(self, gp, Xq: np.ndarray, t_query: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """`gp.predict` in float32: ~3x faster, for ranking many candidates before a polish."""
        Xq = np.asarray(Xq, dtype=float)
        tq = np.array([float(t_query)])
        prior = gp.prior_variance(Xq, tq)
        if gp.n == 0:
            return np.zeros(len(Xq)), prior
        kq = self._cov(gp, Xq, tq)
        L32, v32, _ = self._factor(gp)
        V = solve_triangular(L32, kq.T, lower=True, check_finite=False)
        mean = (V.T @ v32).astype(float)
        var = prior - np.einsum("ij,ij->j", V, V).astype(float)
        return mean, np.maximum(var, 0.0)

    def best(self, gp, Xq: np.ndarray, t_query: float, score, k: int) -> np.ndarray:
        """Indices `(k,)` of the rows of `Xq` `(m, d)` with the largest `score(mean, var)` under the
        float32 screening posterior, for a `score` nondecreasing in `var` (e.g. the UCB).

        Same ranking as `predict` with far less work: the explained variance
        `|L^{-1} k(x)|^2` is a sum over the rows of `L`, so after its first `b` rows
        `score(mean, prior - partial sum)` bounds a candidate's score from above. Full solves run
        only for a pilot set (the best bounds after the first block) and for the candidates whose
        bound stays above the pilot's k-th best score. `mean = k^T alpha` (RW2006 Alg. 2.1, line 4).
        """
        Xq = np.asarray(Xq, dtype=float)
        m = len(Xq)
        k = min(int(k), m)
        pilot_size = max(8 * k, 32)
        if gp.n <= 2 * _SCREEN_BLOCK or m <= 2 * pilot_size:
            return _top(score(*self.predict(gp, Xq, t_query)), k)
        tq = np.array([float(t_query)])
        prior = gp.prior_variance(Xq, tq)
        kq = self._cov(gp, Xq, tq)
        L32, _, a32 = self._factor(gp)
        mean = (kq @ a32).astype(float)
        b = _SCREEN_BLOCK
        V = solve_triangular(L32[:b, :b], kq[:, :b].T, lower=True, check_finite=False)  # (b, m)
        bound = score(mean, np.maximum(prior - _col_sq(V), 0.0))
        pilot = _top(bound, pilot_size)
        Vp = solve_triangular(L32, kq[pilot].T, lower=True, check_finite=False)
        best = score(mean[pilot], np.maximum(prior[pilot] - _col_sq(Vp), 0.0))
        tau = np.partition(best, len(best) - k)[len(best) - k]  # k-th best pilot score
        outside = np.ones(m, dtype=bool)
        outside[pilot] = False
        alive = np.flatnonzero(outside & (bound > tau))
        V, explained, bound = V[:, alive], _col_sq(V[:, alive]), bound[alive]
        while alive.size and b < gp.n:
            e = min(2 * b, gp.n)  # blocks double: most candidates drop out after the first
            rhs = kq[alive, b:e].T - L32[b:e, :b] @ V
            Vb = solve_triangular(L32[b:e, b:e], rhs, lower=True, check_finite=False)
            explained = explained + _col_sq(Vb)
            bound = score(mean[alive], np.maximum(prior[alive] - explained, 0.0))
            keep = bound > tau
            alive, explained, bound = alive[keep], explained[keep], bound[keep]
            V = np.vstack([V[:, keep], Vb[:, keep]])
            b = e
        idx = np.concatenate([pilot, alive])  # survivors' bounds are exact scores once b == n
        return idx[_top(np.concatenate([best, bound]), k)]

    def _cov(self, gp, Xq: np.ndarray, tq: np.ndarray) -> np.ndarray:
        """`k(Xq, X)` in float32, `(m, n)`."""
        kq = gp.kernel(Xq, gp.X_, dtype=np.float32)
        if gp.temporal is not None:
            kq *= gp.temporal(tq, gp.times_).astype(np.float32)
        return kq

    def _factor(self, gp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(L, L^{-1} y, alpha)` in float32, from the float64 factor; cached until it changes."""
        if self._L32 is None:
            self._L32 = (gp.L_.astype(np.float32), gp.v_.astype(np.float32),
                         gp.alpha_.astype(np.float32))
        return self._L32
