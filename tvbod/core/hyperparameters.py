"""MAP estimation of kernel lengthscales under independent Gamma priors (and, optionally, of the
signal variance and the noise variance under log-uniform priors within bounds).

Maximizes `log p(y | X, theta) + sum_i log Gamma(l_i; a, b)` over `u = log theta` (bounded), by
multi-start L-BFGS-B with the analytic gradient (RW2006 eq. 5.9):
`d log p(y|X) / d theta = 1/2 tr(W dK/d theta)` with `W = alpha alpha^T - K^{-1}`, where
`dK/d log l_i = G * T * S_i / l_i^2` (`S_i` the squared differences in dimension i, `G` the
kernel's radial factor, `T` the temporal factor), `dK/d log sigma_f^2 = K_f` (the signal part)
and `dK/d log sigma_n^2 = sigma_n^2 I`.

Cost per objective evaluation: one Cholesky (`dpotrf`), `K^{-1}` from the factor (`dpotri`, a
third of `cho_solve(L, I)`'s flops) and, for the d lengthscale traces, one matrix-vector product
`S vec(W * G * T)` with the data's squared differences `S` (`(d, n^2)`, computed once per fit):
no `(d, n, n)` gradient tensor is built per evaluation.

A refit starts from the current values (a warm start) plus `restarts` prior draws. With
`tolerance > 0` the warm start's L-BFGS-B run is skipped when L-BFGS-B's own stopping test
(the projected gradient's largest entry, in nats per unit of log theta) already holds at the
current values with that tolerance: the decision depends only on the data and the current values.
With `stop_at_tolerance` every run also stops at that tolerance (its `gtol`): a refit ends where
the next one would be skipped, not at SciPy's 1e-5.
A failed Cholesky inside the objective returns `-inf` (scikit-learn's habit), so the optimizer
moves away instead of crashing. Pure: the caller passes the data and a seeded generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky
from scipy.linalg.lapack import dpotrf, dpotri, dpotrs

from .kernels import Matern52, SquaredExponential

_SQRT5 = math.sqrt(5.0)
_LOG_2PI = math.log(2.0 * math.pi)


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


class _Objective:
    """The data and the options of one fit; subclasses evaluate `(value, gradient)` at a `theta`."""

    def __init__(self, kernel_type: type, X: np.ndarray, y: np.ndarray, prior: GammaPrior,
                 temporal_K: np.ndarray | None = None, learn_variance: bool = False,
                 learn_noise: bool = False) -> None:
        if kernel_type not in (SquaredExponential, Matern52):
            raise TypeError(f"lengthscale fitting needs a stationary kernel, got {kernel_type.__name__}")
        self.kernel_type, self.prior, self.T = kernel_type, prior, temporal_K
        self.X, self.y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        self.learn_variance, self.learn_noise = learn_variance, learn_noise


class LogPosterior(_Objective):
    """`log p(y | X, theta) + log p(l)` and its gradient on fixed data, for any `theta`.

    The per-dimension squared differences `S` (`(d, n^2)`, row i the flattened `(x_i - x'_i)^2`)
    are computed once here; each call costs one Cholesky, one `dpotri` and O(n^2 d) elementwise
    work and matrix-vector products.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        n, d = self.X.shape
        S = np.empty((d, n, n))
        for i in range(d):
            np.subtract.outer(self.X[:, i], self.X[:, i], out=S[i])
            np.square(S[i], out=S[i])
        self.S = S.reshape(d, n * n)

    def _kernel(self, lengthscales: np.ndarray, variance: float):
        """`(K, G)`: the signal covariance (temporal factor included) and the radial factor with
        `dK/d log l_i = G * S_i / l_i^2` (for the SE kernel `G` is `K` itself)."""
        n = len(self.y)
        r2 = ((1.0 / lengthscales**2) @ self.S).reshape(n, n)
        if self.kernel_type is SquaredExponential:
            K = np.exp(-0.5 * r2)
            K *= variance
            G = K
        else:
            r = np.sqrt(r2)
            e = np.exp(-_SQRT5 * r)
            s5r = _SQRT5 * r
            K = variance * (1.0 + s5r + (5.0 / 3.0) * r2) * e
            G = (5.0 / 3.0) * variance * (1.0 + s5r) * e
        if self.T is not None:
            K *= self.T
            if G is not K:
                G *= self.T
        return K, G

    def __call__(self, lengthscales: np.ndarray, variance: float, noise_variance: float,
                 ) -> tuple[float, np.ndarray]:
        """`(value, gradient)` w.r.t. `log l` (then `log sigma_f^2`, `log sigma_n^2` when learned);
        `(-inf, 0)` if K won't factor."""
        n, y = len(self.y), self.y
        size = len(lengthscales) + self.learn_variance + self.learn_noise
        K, G = self._kernel(lengthscales, variance)
        K[np.diag_indices(n)] += noise_variance  # G's diagonal meets S_ii = 0: harmless
        L, info = dpotrf(K, lower=1, clean=1)
        if info != 0:
            return -math.inf, np.zeros(size)
        alpha, _ = dpotrs(L, y, lower=1)
        lml = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * _LOG_2PI
        W = _outer_minus_inverse(alpha, L)
        trace_w = float(np.trace(W))
        extra = []
        if self.learn_variance:  # tr(W K_f) with the signal part K_f = K - sigma_n^2 I
            extra.append(0.5 * (float(np.vdot(W, K)) - noise_variance * trace_w))
        if self.learn_noise:
            extra.append(0.5 * noise_variance * trace_w)
        W *= G
        grad = 0.5 * (self.S @ W.ravel()) / lengthscales**2
        grad += self.prior.dlog_pdf_dlog_l(lengthscales)
        if extra:
            grad = np.concatenate([grad, extra])
        return lml + self.prior.log_pdf(lengthscales), grad


def _outer_minus_inverse(alpha: np.ndarray, L: np.ndarray) -> np.ndarray:
    """`W = alpha alpha^T - K^{-1}` (full, symmetric) from the lower Cholesky factor `L` of K:
    `dpotri` writes the lower triangle of `K^{-1}` (the upper stays zero: `L` is clean)."""
    inv, _ = dpotri(L, lower=1)
    W = np.outer(alpha, alpha)
    W -= inv
    W -= inv.T
    di = np.diag_indices(len(alpha))
    W[di] += inv[di]
    return W


class ExplicitInverseLogPosterior(_Objective):
    """The same objective as tvbod 0.2 evaluated it, bit for bit: `K^{-1}` by `cho_solve(L, I)`
    and the `(d, n, n)` tensor of `dK/d log l_i`, rebuilt from `X / l` at every call. Kept only
    so that state written under it (behaviour versions 1-2, `tvbod.core.behaviours`) replays
    exactly; a few times slower than `LogPosterior`."""

    def _kernel_and_grads(self, kernel):
        Z = self.X / kernel.lengthscales
        D = (Z[:, None, :] - Z[None, :, :]) ** 2  # (n, n, d): (delta_i / l_i)^2
        r2 = D.sum(-1)
        if isinstance(kernel, SquaredExponential):
            K = kernel.variance * np.exp(-0.5 * r2)
            G = K
        else:
            r = np.sqrt(r2)
            e = np.exp(-_SQRT5 * r)
            K = kernel.variance * (1.0 + _SQRT5 * r + (5.0 / 3.0) * r2) * e
            G = (5.0 / 3.0) * kernel.variance * (1.0 + _SQRT5 * r) * e
        if self.T is not None:
            K = K * self.T
            G = G * self.T
        return K, np.moveaxis(G[:, :, None] * D, -1, 0)

    def __call__(self, lengthscales: np.ndarray, variance: float, noise_variance: float,
                 ) -> tuple[float, np.ndarray]:
        kernel, y, n = self.kernel_type(lengthscales, variance), self.y, len(self.y)
        K, dK = self._kernel_and_grads(kernel)
        signal = K.copy() if self.learn_variance else None
        K[np.diag_indices(n)] += noise_variance
        size = len(lengthscales) + self.learn_variance + self.learn_noise
        try:
            L = cholesky(K, lower=True, check_finite=False)
        except LinAlgError:
            return -math.inf, np.zeros(size)
        alpha = cho_solve((L, True), y, check_finite=False)
        lml = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * math.log(2 * math.pi)
        W = np.outer(alpha, alpha) - cho_solve((L, True), np.eye(n), check_finite=False)
        grad = 0.5 * np.einsum("ij,kji->k", W, dK) + self.prior.dlog_pdf_dlog_l(kernel.lengthscales)
        extra = []
        if self.learn_variance:
            extra.append(0.5 * float(np.einsum("ij,ij->", W, signal)))
        if self.learn_noise:
            extra.append(0.5 * noise_variance * float(np.trace(W)))
        if extra:
            grad = np.concatenate([grad, extra])
        return lml + self.prior.log_pdf(kernel.lengthscales), grad


#: `hyperparameters.objective`: how the objective is evaluated (the same function, rounded
#: differently); `explicit-inverse` is behaviour versions 1-2's, kept for replaying their state.
OBJECTIVES = {"factored": LogPosterior, "explicit-inverse": ExplicitInverseLogPosterior}


def log_posterior(kernel, X, y, noise_variance, prior: GammaPrior, temporal_K=None,
                  learn_variance: bool = False, learn_noise: bool = False,
                  objective: str = "factored") -> tuple[float, np.ndarray]:
    """`log p(y | X, theta) + log p(l)` and its gradient w.r.t. `log l` (then `log sigma_f^2` and
    `log sigma_n^2` when learned, flat priors in log space); `(-inf, 0)` if K won't factor."""
    f = OBJECTIVES[objective](type(kernel), X, y, prior, temporal_K, learn_variance, learn_noise)
    return f(kernel.lengthscales, kernel.variance, noise_variance)


class Hyperparameters(NamedTuple):
    """A fitted `(lengthscales (d,), signal variance sigma_f^2, noise variance sigma_n^2)`;
    `skipped`: the warm start already met the refit tolerance (no optimizer run from it)."""

    lengthscales: np.ndarray
    variance: float
    noise_variance: float
    skipped: bool = False


def converged(grad: np.ndarray, u: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              tolerance: float) -> bool:
    """L-BFGS-B's stopping test at `u`: the projected gradient of the objective
    (`max_i |clip(u_i + grad_i, lo_i, hi_i) - u_i|`, `grad` the ascent direction of the log
    posterior) is at most `tolerance`. A bound that the gradient pushes against counts as zero."""
    return bool(np.max(np.abs(np.clip(u + grad, lo, hi) - u), initial=0.0) <= tolerance)


def _multistart(negative: Callable, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray,
                maxiter: int, tolerance: float, stop: float | None = None
                ) -> tuple[np.ndarray, bool]:
    """Best L-BFGS-B result over `starts` (the first is the warm start) and whether the warm
    start's run was skipped by `tolerance` (its value is then the warm start's own); each run
    stops once its projected gradient is at most `stop` (L-BFGS-B's `gtol`; None: SciPy's)."""
    best_u, best_f, skipped, first = starts[0], math.inf, False, None
    if tolerance > 0.0:
        first = (starts[0], *negative(starts[0]))
        if first[1] < 1e25 and converged(-first[2], starts[0], lo, hi, tolerance):
            best_f, skipped = first[1], True

    def cached(u: np.ndarray) -> tuple[float, np.ndarray]:  # L-BFGS-B starts at the tested point
        if first is not None and np.array_equal(u, first[0]):
            return first[1], first[2].copy()
        return negative(u)

    from scipy.optimize import minimize  # ~1 s of import: paid at the first fit, not at start

    for u0 in starts[skipped:]:
        res = minimize(cached, u0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                       options={"maxiter": maxiter, **({} if stop is None else {"gtol": stop})})
        if res.fun < best_f:
            best_u, best_f = res.x, float(res.fun)
    return np.clip(best_u, lo, hi), skipped


def fit_hyperparameters(kernel, X: np.ndarray, y: np.ndarray, noise_variance: float,
                        prior: GammaPrior, bounds: tuple[float, float], rng: np.random.Generator,
                        restarts: int = 0, maxiter: int = 50, temporal_K: np.ndarray | None = None,
                        variance_bounds: tuple[float, float] | None = None,
                        noise_bounds: tuple[float, float] | None = None,
                        fixed_lengthscales: bool = False, tolerance: float = 0.0,
                        objective: str = "factored", stop_at_tolerance: bool = False
                        ) -> Hyperparameters:
    """MAP lengthscales and, with `variance_bounds` / `noise_bounds`, the signal and noise
    variances (log-uniform priors on those intervals), in one L-BFGS-B problem over `log theta`
    started from the current values (and `restarts` lengthscale draws from the prior).
    `fixed_lengthscales` pins the lengthscales (only the variances move). `tolerance`: skip the
    warm start's run when its projected gradient is at most this (module docstring), and with
    `stop_at_tolerance` stop every run there too (else at SciPy's `gtol`, 1e-5);
    `objective`: a key of `OBJECTIVES`."""
    learn_v, learn_n = variance_bounds is not None, noise_bounds is not None
    d = len(kernel.lengthscales)
    if len(y) == 0:
        if not (learn_v or learn_n):  # no data: the prior's mode is the MAP
            mode = min(max(prior.mode, bounds[0]), bounds[1])
            return Hyperparameters(np.full(d, mode), kernel.variance, noise_variance)
        return Hyperparameters(kernel.lengthscales.copy(), kernel.variance, noise_variance)
    f = OBJECTIVES[objective](type(kernel), X, y, prior, temporal_K, learn_v, learn_n)
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

    def unpack(u: np.ndarray) -> tuple[np.ndarray, float, float]:
        return (np.exp(u[:d]), math.exp(u[d]) if learn_v else kernel.variance,
                math.exp(u[-1]) if learn_n else noise_variance)

    def negative(u: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = f(*unpack(u))
        if not math.isfinite(value):
            return 1e25, np.zeros(len(u))
        if fixed_lengthscales:
            grad[:d] = 0.0
        return -value, -grad

    starts = [np.clip(current, lo, hi)]
    for _ in range(0 if fixed_lengthscales else restarts):
        draw = np.log(np.maximum(rng.gamma(prior.shape, 1.0 / prior.rate, size=d), 1e-12))
        starts.append(np.clip(np.concatenate([draw, current[d:]]), lo, hi))
    inside = np.array_equal(starts[0], current)  # a skip keeps the current values as they are
    stop = tolerance if stop_at_tolerance and tolerance > 0.0 else None
    best, skipped = _multistart(negative, starts, lo, hi, maxiter, tolerance if inside else 0.0,
                                stop)
    if skipped and np.array_equal(best, starts[0]):  # exactly: exp(log(l)) need not be l
        return Hyperparameters(kernel.lengthscales.copy(), kernel.variance, noise_variance, True)
    ls, v, nv = unpack(best)
    return Hyperparameters(ls, float(v), float(nv), skipped)
