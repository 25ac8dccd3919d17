"""Exact GP posterior of the latent function on the current dataset D, kept as a Cholesky factor.

Appending one observation extends the factor in O(n^2) (block Cholesky) instead of refactorizing
in O(n^3); a reset empties it. The factor's history is reproducible: it is the full factorization of
the first `full_n_` points followed by appends, so a restored GP is bit-identical to the live one.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cholesky, solve_triangular

from .errors import NumericalError
from .query_set import QuerySetPosterior
from .screen import Float32Screen

#: Factors smaller than this (n) are never packed: not worth the copies.
PACK_MIN_N = 64
#: Largest jitter tried, relative to the mean prior variance, before giving up.
MAX_RELATIVE_JITTER = 1e-4
_FIRST_RELATIVE_JITTER = 1e-10


class ExactGP:
    """GP regression with a zero prior mean, Gaussian noise `sigma_n^2` and an optional temporal factor.

    The covariance of two observations is `k(x, x') * k_T(t, t')` (`k_T = 1` when `temporal` is None).
    `predict` returns the posterior mean and variance of the *latent* f (noise excluded).
    """

    def __init__(self, kernel, noise_variance: float, temporal=None) -> None:
        if not noise_variance > 0:
            raise ValueError("noise_variance must be > 0")
        self.kernel = kernel
        self.noise_variance = float(noise_variance)
        self.temporal = temporal
        self._query = None
        self._screen = Float32Screen()
        self.reset()

    @property
    def n(self) -> int:
        return self.y_.size

    def reset(self) -> None:
        """Empty the dataset (the ET-GP-UCB reset keeps nothing of the old factor)."""
        self.X_ = None
        self.y_ = np.empty(0)
        self.times_ = np.empty(0)
        self.L_ = np.empty((0, 0))
        self.v_ = np.empty(0)  # L^{-1} y
        self.jitter_ = 0.0
        self.full_n_ = 0
        self._alpha = None
        self._screen.invalidate()
        if self._query is not None:
            self._query.reset()

    @property
    def L_(self) -> np.ndarray:
        """The lower Cholesky factor `(n, n)`. Between steps it may be held packed
        (`pack_factor`); the first read rebuilds it bit for bit, in its memory order, and keeps
        it until the next `pack_factor`."""
        if self._L is None:
            n, order = self._packed_shape
            L = np.zeros((n, n), order=order)
            L[np.tri(n, dtype=bool)] = self._L_packed
            self._L, self._L_packed = L, None
        return self._L

    @L_.setter
    def L_(self, L: np.ndarray) -> None:
        self._L, self._L_packed = L, None

    def pack_factor(self) -> bool:
        """Hold the factor as its lower triangle only, row by row (half the memory) until it is
        read again; True if packed (a daemon packs its plants' factors between steps). Exact: a
        factor here has an exact-zero upper triangle (scipy's `cholesky`, `append`'s `np.zeros`)."""
        L = self._L
        n = 0 if L is None else L.shape[0]
        if n < PACK_MIN_N:
            return False
        lower = np.tri(n, dtype=bool)
        self._packed_shape = (n, "F" if L.flags.f_contiguous and not L.flags.c_contiguous else "C")
        self._L_packed, self._L = L[lower], None
        return True

    def _cov(self, a, ta, b, tb) -> np.ndarray:
        k = self.kernel(a, b)
        if self.temporal is not None:
            k = k * self.temporal(ta, tb)
        return k

    def prior_variance(self, a, ta) -> np.ndarray:
        """Prior variance of f at the rows of `a` at time(s) `ta`, `(m,)`."""
        v = self.kernel.diag(a)
        if self.temporal is not None:
            v = v * self.temporal.diag(np.broadcast_to(ta, (len(a),)))
        return v

    def fit(self, X: np.ndarray, y: np.ndarray, times: np.ndarray, jitter: float | None = None) -> None:
        """Replace the dataset and factorize it in full, escalating the jitter if needed.

        With `jitter` given, exactly that jitter is used (restoring a recorded factor).
        """
        X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float).reshape(-1)
        times = np.asarray(times, dtype=float).reshape(-1)
        K = self._cov(X, times, X, times)
        K[np.diag_indices_from(K)] += self.noise_variance
        scale = float(np.mean(np.diag(K))) if K.size else 1.0
        tries = [jitter] if jitter is not None else self._jitter_ladder(scale)
        for j in tries:
            try:
                L = cholesky(K + j * np.eye(len(K)), lower=True, check_finite=False)
            except np.linalg.LinAlgError:
                continue
            if np.all(np.diag(L) > 0):
                break
        else:
            raise NumericalError(
                f"kernel matrix of {len(K)} points is not positive definite even with jitter "
                f"{tries[-1]:.3g}; check for duplicate points with tiny noise or bad lengthscales"
            )
        self.X_, self.y_, self.times_ = X.copy(), y.copy(), times.copy()
        self.L_, self.jitter_, self.full_n_ = L, float(j), len(y)
        self.v_ = solve_triangular(L, y, lower=True, check_finite=False)
        self._alpha = None
        self._screen.invalidate()
        if self._query is not None:
            self._query.rebuild(self)

    def _jitter_ladder(self, scale: float) -> list[float]:
        first = max(self.jitter_, 0.0)
        ladder = [first]
        j = max(first * 10.0, _FIRST_RELATIVE_JITTER * scale)
        while j <= MAX_RELATIVE_JITTER * scale * (1 + 1e-12):
            ladder.append(j)
            j *= 10.0
        return ladder

    def refactor(self) -> None:
        """Full refactorization of the current dataset (after a kernel hyperparameter change)."""
        if self.n:
            self.fit(self.X_, self.y_, self.times_)

    def append(self, x: np.ndarray, y: float, t: float) -> None:
        """Add one observation: `L_{n+1} = [[L, 0], [l^T, d]]`, `l = L^{-1} k`, `d^2 = k** + sigma_n^2 - l.l`."""
        x = np.asarray(x, dtype=float).reshape(1, -1)
        if self.n == 0:
            self.fit(x, np.array([y]), np.array([t]))
            return
        tx = np.array([float(t)])
        k = self._cov(self.X_, self.times_, x, tx)[:, 0]
        kss = float(self.prior_variance(x, tx)[0]) + self.noise_variance + self.jitter_
        l = solve_triangular(self.L_, k, lower=True, check_finite=False)
        d2 = kss - float(l @ l)
        if not d2 > 1e-12 * kss:
            # Numerically singular extension: refactorize everything with more jitter.
            self.fit(np.vstack([self.X_, x]), np.append(self.y_, y), np.append(self.times_, t))
            return
        d = np.sqrt(d2)
        n = self.n
        L = np.zeros((n + 1, n + 1))
        L[:n, :n] = self.L_
        L[n, :n] = l
        L[n, n] = d
        v_new = (float(y) - float(l @ self.v_)) / d
        self.L_ = L
        self.v_ = np.append(self.v_, v_new)
        self.X_ = np.vstack([self.X_, x])
        self.y_ = np.append(self.y_, float(y))
        self.times_ = np.append(self.times_, float(t))
        self._alpha = None
        self._screen.invalidate()
        if self._query is not None:
            self._query.append(self, x, tx, l, d, v_new)

    # ------------------------------------------------------------------ prediction
    @property
    def alpha_(self) -> np.ndarray:
        """`alpha = K^{-1} y = L^{-T} (L^{-1} y)` (RW2006 Alg. 2.1, line 3)."""
        if self._alpha is None:
            self._alpha = solve_triangular(self.L_.T, self.v_, lower=False, check_finite=False)
        return self._alpha

    def predict(self, Xq: np.ndarray, t_query: float = 0.0, prior_mean: float = 0.0
                ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of f at `Xq` `(m, d)` for time `t_query`; shapes `(m,)`.

        `prior_mean` m: the posterior under the constant prior mean m instead of 0,
        `m + k^T K^{-1} (y - m 1)` (RW2006 eq. 2.38 with a constant mean function; the variance
        does not depend on it), as the safety model reads it (`tvbod.core.safety`)."""
        Xq = np.asarray(Xq, dtype=float)
        tq = np.array([float(t_query)])
        prior = self.prior_variance(Xq, tq)
        if self.n == 0:
            return np.full(len(Xq), float(prior_mean)), prior
        kq = self._cov(Xq, tq, self.X_, self.times_)
        V = solve_triangular(self.L_, kq.T, lower=True, check_finite=False)
        mean = V.T @ self.v_
        if prior_mean:
            ones = solve_triangular(self.L_, np.ones(self.n), lower=True, check_finite=False)
            mean = mean + prior_mean * (1.0 - V.T @ ones)
        var = prior - np.einsum("ij,ij->j", V, V)
        return mean, np.maximum(var, 0.0)

    def data_mean(self, t: float) -> np.ndarray:
        """The posterior mean at every point of D for step `t`.

        Without a temporal factor the prior covariance of D is the factorized matrix less its
        diagonal `(sigma_n^2 + jitter) I`, so `mu(X) = K alpha = y - (sigma_n^2 + jitter) alpha`
        (RW2006 eq. 2.25 at the training inputs): O(n) instead of the O(n^2 d) kernel and O(n^3)
        solve of a full prediction, which the daemon would otherwise pay after every tell. A
        temporal factor makes the prior at step `t` differ from the data's: predicted in full."""
        if self.temporal is not None:
            return self.predict(self.X_, t)[0]
        return self.y_ - (self.noise_variance + self.jitter_) * self.alpha_

    def one_step_variances(self) -> np.ndarray:
        """Variance of f at each data point given the points before it (in D's order), `(n,)`:
        `L_jj^2 - sigma_n^2 - jitter` (the factor's pivots), clipped to `[0, prior]`."""
        pivots = np.diag(self.L_) ** 2 - self.noise_variance - self.jitter_
        return np.clip(pivots, 0.0, self.prior_variance(self.X_, self.times_))

    def release_screen(self) -> None:
        """Free the float32 copy of the factor (n^2 / 2 words); the next screen rebuilds it, as
        any append would. A daemon hosting many plants then holds only `L` per plant."""
        self._screen.invalidate()

    def screen_best(self, Xq: np.ndarray, t_query: float, score, k: int) -> np.ndarray:
        """Indices `(k,)` of the rows of `Xq` with the largest `score(mean, var)` under the float32
        screening posterior, for a `score` nondecreasing in `var` (`screen.Float32Screen.best`)."""
        return self._screen.best(self, Xq, t_query, score, k)

    # ------------------------------------------------------------------ finite query set
    def attach_query_set(self, Zq: np.ndarray) -> None:
        """Keep the posterior on a fixed finite set `Zq` up to date (`query_set.QuerySetPosterior`)."""
        self._query = QuerySetPosterior(Zq)
        self._query.rebuild(self)

    def predict_query_set(self, t_query: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance on the attached query set at time `t_query`."""
        return self._query.predict(self, t_query)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Plain-data state: the data, and how the factor was built (`full_n`, `jitter`)."""
        X = np.empty((0, 0)) if self.X_ is None else self.X_
        return {
            "X": X.tolist(),
            "y": self.y_.tolist(),
            "times": self.times_.tolist(),
            "full_n": int(self.full_n_),
            "jitter": float(self.jitter_),
        }

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the factor exactly as it was built: full factorization of `full_n` points, then appends."""
        self.reset()
        y = np.asarray(state["y"], dtype=float).reshape(-1)
        if y.size == 0:
            return
        X = np.asarray(state["X"], dtype=float).reshape(y.size, -1)
        times = np.asarray(state["times"], dtype=float).reshape(-1)
        k = int(state["full_n"])
        self.fit(X[:k], y[:k], times[:k], jitter=float(state["jitter"]))
        for i in range(k, y.size):
            self.append(X[i], y[i], times[i])


def predict_with_grad(
    gp: ExactGP, Xq: np.ndarray, t_query: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`gp`'s posterior mean, variance and their input gradients `(m, d)` (stationary spatial kernels only).

    `d mu = dk^T alpha`, `d var = -2 dk^T K^{-1} k` (the prior variance is constant in x). With
    `dk_j/dx = g_j (x - x_j) / l^2` (`kernel.grad_factor`) both are `(m, n)` weights times
    `x - x_j`: two small matrix products instead of an `(m, n, d)` array.
    """
    Xq = np.asarray(Xq, dtype=float)
    tq = np.array([float(t_query)])
    prior = gp.prior_variance(Xq, tq)
    m, d = Xq.shape
    if gp.n == 0:
        return np.zeros(m), prior, np.zeros((m, d)), np.zeros((m, d))
    k, g = gp.kernel.grad_factor(Xq, gp.X_)
    if gp.temporal is not None:
        w = gp.temporal(tq, gp.times_)  # (1, n)
        k = k * w
        g = g * w
    V = solve_triangular(gp.L_, k.T, lower=True, check_finite=False)
    W = solve_triangular(gp.L_.T, V, lower=False, check_finite=False)  # K^{-1} k, (n, m)
    mean = V.T @ gp.v_
    var = prior - np.einsum("ij,ij->j", V, V)
    # sum_j c_mj (x_m - x_j) = (x_m - x_0) sum_j c_mj - sum_j c_mj (x_j - x_0), x_0 = Xq[0]
    # (centering keeps the cancellation at the scale of the query batch)
    Xc, xc = gp.X_ - Xq[0], Xq - Xq[0]
    inv_l2 = 1.0 / gp.kernel.lengthscales**2
    C = np.concatenate([g * gp.alpha_, -2.0 * (g * W.T)])  # (2m, n)
    G = (np.concatenate([xc, xc]) * C.sum(axis=1)[:, None] - C @ Xc) * inv_l2
    dmean, dvar = G[:m], G[m:]
    clamped = var <= 0
    dvar[clamped] = 0.0
    return mean, np.maximum(var, 0.0), dmean, dvar
