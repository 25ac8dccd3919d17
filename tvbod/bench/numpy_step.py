"""The plain numpy/scipy GP-UCB step for `tvbod bench latency --compare numpy`: what the step costs
written directly, without the project's screen or polish. On the strategy's data (same SE kernel,
noise and `beta_t`): append the new point to the Cholesky factor (O(n^2)), score 1000 scrambled Sobol
candidates on the float64 posterior, and polish the best 5 together as one L-BFGS-B problem with the
analytic gradient (`scipy.optimize.minimize`, default tolerances, `maxiter` 50)."""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.optimize import minimize

CANDIDATES, STARTS, MAXITER = 1000, 5, 50


class PlainStep:
    """One tell + ask, in plain numpy/scipy, on copies of a strategy's GP data."""

    def __init__(self, noise_variance: float, lengthscale, beta) -> None:
        self.noise_variance, self.lengthscale, self.beta = noise_variance, lengthscale, beta

    def _k(self, a, b, ls):
        from scipy.spatial.distance import cdist

        return np.exp(-0.5 * cdist(a / ls, b / ls, "sqeuclidean"))

    def step(self, X, y, L, x_new, y_new, beta: float, ls: float, seed: int) -> np.ndarray:
        """Append `(x_new, y_new)` to `(X, y, L)`, then maximize the UCB; the proposal `(d,)`."""
        from scipy.stats import qmc

        kx = self._k(X, x_new[None, :], ls)[:, 0]
        row = solve_triangular(L, kx, lower=True)
        n = len(X)
        L1 = np.zeros((n + 1, n + 1))
        L1[:n, :n], L1[n, :n] = L, row
        L1[n, n] = np.sqrt(1.0 + self.noise_variance - row @ row)
        X1, y1 = np.vstack([X, x_new]), np.append(y, y_new)
        alpha = cho_solve((L1, True), y1)
        kappa = np.sqrt(beta)

        def ucb(Z):
            Ks = self._k(Z, X1, ls)
            V = solve_triangular(L1, Ks.T, lower=True)
            return Ks @ alpha + kappa * np.sqrt(np.maximum(1.0 - (V * V).sum(0), 0.0)), Ks, V

        d = X.shape[1]
        with warnings.catch_warnings():  # 1000 is not a power of 2: scipy warns, the count
            warnings.simplefilter("ignore", UserWarning)
            cands = qmc.Sobol(d, scramble=True, seed=seed).random(CANDIDATES)
        starts = cands[np.argsort(-ucb(cands)[0])[:STARTS]]

        def neg(flat):
            Z = flat.reshape(STARTS, d)
            value, Ks, V = ucb(Z)
            W = cho_solve((L1, True), Ks.T)  # K^-1 k
            sd = np.sqrt(np.maximum(1.0 - (V * V).sum(0), 1e-300))
            diff = (Z[:, None, :] - X1[None, :, :]) / ls**2  # dk/dz = -k diff
            dmean = -np.einsum("mn,mnd->md", Ks * alpha, diff)
            dvar = 2.0 * np.einsum("mn,mnd->md", Ks * W.T, diff)
            return -value.sum(), -(dmean + kappa * dvar / (2.0 * sd[:, None])).ravel()

        res = minimize(neg, starts.ravel(), jac=True, method="L-BFGS-B",
                       bounds=[(0.0, 1.0)] * (STARTS * d), options={"maxiter": MAXITER})
        ends = np.clip(res.x.reshape(STARTS, d), 0.0, 1.0)
        both = np.vstack([starts, ends])
        return both[int(np.argmax(ucb(both)[0]))]

    def time_steps(self, base, steps: list[int], warmup: int) -> tuple[list[float], list]:
        """Seconds per plain step at each of `steps` (after `warmup` untimed ones), proposals: the
        step's data are `base`'s first n - 1 points and its told point the n-th, so its ask sees
        the same n points as the project's."""
        gp = base.gp
        X, y, ls = gp.X_[:-1], gp.y_[:-1], self.lengthscale(base.domain.dim)
        K = self._k(X, X, ls) + self.noise_variance * np.eye(len(X))
        L = np.linalg.cholesky(K)
        x_new, y_new = gp.X_[-1], float(gp.y_[-1])
        for k in range(warmup):
            self.step(X, y, L, x_new, y_new, self.beta(base, steps[0]), ls, seed=10_000 + k)
        times, props = [], []
        for k, t in enumerate(steps):
            t0 = time.perf_counter()
            props.append(self.step(X, y, L, x_new, y_new, self.beta(base, t), ls, seed=k))
            times.append(time.perf_counter() - t0)
        return times, props
