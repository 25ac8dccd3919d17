"""MAP estimation of kernel lengthscales under independent Gamma priors.

Maximizes `log p(y | X, l) + sum_i log Gamma(l_i; a, b)` over `u = log l` (bounded), by
multi-start L-BFGS-B with the analytic gradient (RW2006 eq. 5.9):
`d log p(y|X) / d theta = 1/2 tr((alpha alpha^T - K^{-1}) dK/d theta)`.
A failed Cholesky inside the objective returns `-inf` (scikit-learn's habit), so the optimizer
moves away instead of crashing. Pure: the caller passes the data and a seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky
from scipy.optimize import minimize

from .kernels import Matern52, SquaredExponential

_SQRT5 = math.sqrt(5.0)


@dataclass(frozen=True)
class GammaPrior:
    """`p(l) = b^a / Gamma(a) l^(a-1) exp(-b l)` (shape `a`, rate `b`): mean `a/b`, mode `(a-1)/b`."""

    shape: float
    rate: float

    def log_pdf(self, l: np.ndarray) -> float:
        a, b = self.shape, self.rate
        return float(np.sum(a * math.log(b) - math.lgamma(a) + (a - 1) * np.log(l) - b * l))

    def dlog_pdf_dlog_l(self, l: np.ndarray) -> np.ndarray:
        """`d log p(l) / d log l = (a - 1) - b l` (chain rule through `l = exp(u)`)."""
        return (self.shape - 1.0) - self.rate * l

    @property
    def mode(self) -> float:
        return max(self.shape - 1.0, 0.0) / self.rate


def _kernel_and_grads(kernel, X: np.ndarray, temporal_K: np.ndarray | None):
    """`K` (spatial x temporal) and `dK/d log l_i` for every dimension i, `(d, n, n)`."""
    ls = kernel.lengthscales
    Z = X / ls
    D = (Z[:, None, :] - Z[None, :, :]) ** 2  # (n, n, d): (delta_i / l_i)^2
    r2 = D.sum(-1)
    if isinstance(kernel, SquaredExponential):
        K = kernel.variance * np.exp(-0.5 * r2)
        G = K
    elif isinstance(kernel, Matern52):
        r = np.sqrt(r2)
        e = np.exp(-_SQRT5 * r)
        K = kernel.variance * (1.0 + _SQRT5 * r + (5.0 / 3.0) * r2) * e
        G = (5.0 / 3.0) * kernel.variance * (1.0 + _SQRT5 * r) * e
    else:
        raise TypeError(f"lengthscale fitting needs a stationary kernel, got {type(kernel).__name__}")
    if temporal_K is not None:
        K = K * temporal_K
        G = G * temporal_K
    dK = np.moveaxis(G[:, :, None] * D, -1, 0)
    return K, dK


def log_posterior(kernel, X, y, noise_variance, prior: GammaPrior, temporal_K=None,
                  ) -> tuple[float, np.ndarray]:
    """`log p(y | X, l) + log p(l)` and its gradient w.r.t. `log l`; `(-inf, 0)` if K won't factor."""
    n = len(y)
    K, dK = _kernel_and_grads(kernel, X, temporal_K)
    K[np.diag_indices(n)] += noise_variance
    try:
        L = cholesky(K, lower=True, check_finite=False)
    except LinAlgError:
        return -math.inf, np.zeros(len(kernel.lengthscales))
    alpha = cho_solve((L, True), y, check_finite=False)
    lml = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * math.log(2 * math.pi)
    W = np.outer(alpha, alpha) - cho_solve((L, True), np.eye(n), check_finite=False)
    grad = 0.5 * np.einsum("ij,kji->k", W, dK)
    ls = kernel.lengthscales
    return lml + prior.log_pdf(ls), grad + prior.dlog_pdf_dlog_l(ls)


def fit_lengthscales(kernel, X: np.ndarray, y: np.ndarray, noise_variance: float,
                     prior: GammaPrior, bounds: tuple[float, float], rng: np.random.Generator,
                     restarts: int = 0, maxiter: int = 50, temporal_K: np.ndarray | None = None,
                     ) -> np.ndarray:
    """MAP lengthscales: L-BFGS-B from the current lengthscales and `restarts` prior draws.

    With no data the prior's mode is the MAP. The result is clipped to `bounds`.
    """
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    d = len(kernel.lengthscales)
    if len(y) == 0:
        return np.full(d, min(max(prior.mode, bounds[0]), bounds[1]))
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)

    def negative(u: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = log_posterior(kernel.with_lengthscales(np.exp(u)), X, y, noise_variance,
                                    prior, temporal_K)
        if not math.isfinite(value):
            return 1e25, np.zeros(d)
        return -value, -grad

    starts = [np.clip(np.log(kernel.lengthscales), lo, hi)]
    for _ in range(restarts):
        draw = rng.gamma(prior.shape, 1.0 / prior.rate, size=d)
        starts.append(np.clip(np.log(np.maximum(draw, 1e-12)), lo, hi))
    best_u, best_f = starts[0], math.inf
    for u0 in starts:
        res = minimize(negative, u0, jac=True, method="L-BFGS-B", bounds=[(lo, hi)] * d,
                       options={"maxiter": maxiter})
        if res.fun < best_f:
            best_u, best_f = res.x, float(res.fun)
    return np.exp(np.clip(best_u, lo, hi))
