"""MAP estimation of kernel lengthscales under independent Gamma priors (and, optionally, of the
signal variance and the noise variance under log-uniform priors within bounds).

Maximizes `log p(y | X, theta) + sum_i log Gamma(l_i; a, b)` over `u = log theta` (bounded), by
multi-start L-BFGS-B with the analytic gradient (RW2006 eq. 5.9):
`d log p(y|X) / d theta = 1/2 tr((alpha alpha^T - K^{-1}) dK/d theta)`, where
`dK/d log sigma_f^2 = K_f` (the signal part) and `dK/d log sigma_n^2 = sigma_n^2 I`.
A failed Cholesky inside the objective returns `-inf` (scikit-learn's habit), so the optimizer
moves away instead of crashing. Pure: the caller passes the data and a seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

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
                  learn_variance: bool = False, learn_noise: bool = False,
                  ) -> tuple[float, np.ndarray]:
    """`log p(y | X, theta) + log p(l)` and its gradient w.r.t. `log l` (then `log sigma_f^2` and
    `log sigma_n^2` when learned, flat priors in log space); `(-inf, 0)` if K won't factor."""
    n = len(y)
    K, dK = _kernel_and_grads(kernel, X, temporal_K)
    signal = K.copy() if learn_variance else None
    K[np.diag_indices(n)] += noise_variance
    size = len(kernel.lengthscales) + learn_variance + learn_noise
    try:
        L = cholesky(K, lower=True, check_finite=False)
    except LinAlgError:
        return -math.inf, np.zeros(size)
    alpha = cho_solve((L, True), y, check_finite=False)
    lml = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * math.log(2 * math.pi)
    W = np.outer(alpha, alpha) - cho_solve((L, True), np.eye(n), check_finite=False)
    grad = 0.5 * np.einsum("ij,kji->k", W, dK)
    ls = kernel.lengthscales
    grad = grad + prior.dlog_pdf_dlog_l(ls)
    extra = []
    if learn_variance:
        extra.append(0.5 * float(np.einsum("ij,ij->", W, signal)))
    if learn_noise:
        extra.append(0.5 * noise_variance * float(np.trace(W)))
    if extra:
        grad = np.concatenate([grad, extra])
    return lml + prior.log_pdf(ls), grad


class Hyperparameters(NamedTuple):
    """A fitted `(lengthscales (d,), signal variance sigma_f^2, noise variance sigma_n^2)`."""

    lengthscales: np.ndarray
    variance: float
    noise_variance: float


def fit_hyperparameters(kernel, X: np.ndarray, y: np.ndarray, noise_variance: float,
                        prior: GammaPrior, bounds: tuple[float, float], rng: np.random.Generator,
                        restarts: int = 0, maxiter: int = 50, temporal_K: np.ndarray | None = None,
                        variance_bounds: tuple[float, float] | None = None,
                        noise_bounds: tuple[float, float] | None = None,
                        fixed_lengthscales: bool = False) -> Hyperparameters:
    """MAP lengthscales and, with `variance_bounds` / `noise_bounds`, the signal and noise
    variances (log-uniform priors on those intervals), in one L-BFGS-B problem over `log theta`
    started from the current values (and `restarts` lengthscale draws from the prior).
    `fixed_lengthscales` pins the lengthscales (only the variances move)."""
    learn_v, learn_n = variance_bounds is not None, noise_bounds is not None
    if not (learn_v or learn_n):
        return Hyperparameters(fit_lengthscales(kernel, X, y, noise_variance, prior, bounds, rng,
                                                restarts, maxiter, temporal_K),
                               kernel.variance, noise_variance)
    d = len(kernel.lengthscales)
    if len(y) == 0:
        return Hyperparameters(kernel.lengthscales.copy(), kernel.variance, noise_variance)
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    u_ls = np.log(kernel.lengthscales)
    box = [(u, u) for u in u_ls] if fixed_lengthscales else [(math.log(bounds[0]),
                                                              math.log(bounds[1]))] * d
    current = list(u_ls)
    for flag, value, bnd in ((learn_v, kernel.variance, variance_bounds),
                             (learn_n, noise_variance, noise_bounds)):
        if flag:
            box.append((math.log(bnd[0]), math.log(bnd[1])))
            current.append(math.log(value))
    lo, hi = np.array([b[0] for b in box]), np.array([b[1] for b in box])

    def unpack(u: np.ndarray):
        v = math.exp(u[d]) if learn_v else kernel.variance
        nv = math.exp(u[-1]) if learn_n else noise_variance
        return type(kernel)(np.exp(u[:d]), v), nv

    def negative(u: np.ndarray) -> tuple[float, np.ndarray]:
        k, nv = unpack(u)
        value, grad = log_posterior(k, X, y, nv, prior, temporal_K, learn_v, learn_n)
        if not math.isfinite(value):
            return 1e25, np.zeros(len(u))
        if fixed_lengthscales:
            grad = np.concatenate([np.zeros(d), grad[d:]])
        return -value, -grad

    starts = [np.clip(current, lo, hi)]
    for _ in range(0 if fixed_lengthscales else restarts):
        draw = np.log(np.maximum(rng.gamma(prior.shape, 1.0 / prior.rate, size=d), 1e-12))
        starts.append(np.clip(np.concatenate([draw, current[d:]]), lo, hi))
    best_u, best_f = starts[0], math.inf
    for u0 in starts:
        res = minimize(negative, u0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                       options={"maxiter": maxiter})
        if res.fun < best_f:
            best_u, best_f = res.x, float(res.fun)
    k, nv = unpack(np.clip(best_u, lo, hi))
    return Hyperparameters(k.lengthscales.copy(), float(k.variance), float(nv))


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
