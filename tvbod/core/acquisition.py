"""Acquisitions: GP-UCB `alpha(x) = mu_D(x) + sqrt(beta_t) sigma_D(x)` with `beta_t = c1 ln(c2 t)`,
expected improvement, and the uncertainty-penalized UCB `mu + kappa sigma - lambda sigma^2 C(x)`.

The value objects `UCB`, `EI` and `PenalizedUCB` are what the maximizers (`tvbod.core.optimize`)
take: `score(mean, var)` ranks candidates (nondecreasing in `var`, as `ExactGP.screen_best`
needs), `score_grad(mean, var, dmean, dvar)` is that score and its input gradient for L-BFGS-B,
and `final(points, mean, var)` is the value the winner is picked by among the few screened or
polished points (the smooth score, or with a term too expensive or too rough to optimize:
`screened`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def beta_t(t: int, c1: float, c2: float) -> float:
    """Exploration weight `beta_t = c1 ln(c2 t)` at the global step `t >= 1` (clamped at 0).

    Srinivas et al. (2010, "Gaussian process optimization in the bandit setting", Thm. 1 for a
    finite D: `beta_t = 2 ln(|D| t^2 pi^2 / (6 delta))`; Thm. 2 for a compact box: `2 ln(t^2 2 pi^2 /
    (3 delta)) + O(d ln t)`) bound the regret with a `beta_t` growing as `ln t`; ET-GP-UCB
    (arXiv 2208.10790) takes its `beta_t` from them. `c1 ln(c2 t)` keeps that growth with
    configurable constants (the theorems' constants are conservative in practice)."""
    return max(c1 * math.log(c2 * t), 0.0)


def ucb(mean: np.ndarray, var: np.ndarray, beta: float) -> np.ndarray:
    """`mu + sqrt(beta) sigma`."""
    return mean + math.sqrt(beta) * np.sqrt(np.maximum(var, 0.0))


def ucb_grad(mean, var, dmean, dvar, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """UCB value and its gradient, `d sigma = d var / (2 sigma)` (zero where sigma is 0)."""
    return kappa_ucb_grad(mean, var, dmean, dvar, math.sqrt(beta))


def kappa_ucb_grad(mean, var, dmean, dvar, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """`mu + kappa sigma` and its gradient (`ucb_grad` with `kappa = sqrt(beta)`)."""
    sigma = np.sqrt(np.maximum(var, 0.0))
    value = mean + kappa * sigma
    safe = np.where(sigma > 1e-12, sigma, np.inf)
    grad = dmean + kappa * dvar / (2.0 * safe[:, None])
    return value, grad


# ---------------------------------------------------------------------- EI and the uncertainty penalty
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
#: Finite-difference step for the mean's Hessian (internal coordinates) and the eigenvalue floor.
HESSIAN_STEP = 1e-4
EIGEN_FLOOR = 1e-6


def _norm_pdf_cdf(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy.special import ndtr

    return _INV_SQRT2PI * np.exp(-0.5 * z * z), ndtr(z)


def expected_improvement(mean: np.ndarray, var: np.ndarray, best: float, xi: float = 0.0) -> np.ndarray:
    """`EI = (mu - f* - xi) Phi(z) + sigma phi(z)`, `z = (mu - f* - xi) / sigma` (Jones et al. 1998);
    `max(mu - f* - xi, 0)` where sigma is 0. Non-decreasing in the variance."""
    sigma = np.sqrt(np.maximum(var, 0.0))
    imp = mean - best - xi
    safe = np.where(sigma > 1e-12, sigma, 1.0)
    pdf, cdf = _norm_pdf_cdf(imp / safe)
    return np.where(sigma > 1e-12, imp * cdf + sigma * pdf, np.maximum(imp, 0.0))


def expected_improvement_grad(mean, var, dmean, dvar, best: float, xi: float = 0.0
                              ) -> tuple[np.ndarray, np.ndarray]:
    """EI and its gradient: `dEI = Phi(z) dmu + phi(z) dsigma`, `dsigma = dvar / (2 sigma)`."""
    sigma = np.sqrt(np.maximum(var, 0.0))
    imp = mean - best - xi
    ok = sigma > 1e-12
    safe = np.where(ok, sigma, 1.0)
    pdf, cdf = _norm_pdf_cdf(imp / safe)
    value = np.where(ok, imp * cdf + sigma * pdf, np.maximum(imp, 0.0))
    dsigma = np.where(ok[:, None], dvar / (2.0 * safe[:, None]), 0.0)
    grad = np.where(ok, cdf, (imp > 0).astype(float))[:, None] * dmean + pdf[:, None] * dsigma
    return value, grad


def kappa_ucb(mean: np.ndarray, var: np.ndarray, kappa: float) -> np.ndarray:
    """`mu + kappa sigma` (GP-UCB with `kappa = sqrt(beta)`)."""
    return mean + kappa * np.sqrt(np.maximum(var, 0.0))


def penalized_ucb(mean, var, complexity, kappa: float, lam: float) -> np.ndarray:
    """`alpha = mu + kappa sigma - lambda U`, `U = sigma^2 C` (the uncertainty penalty)."""
    v = np.maximum(var, 0.0)
    return mean + kappa * np.sqrt(v) - lam * v * complexity


def mean_hessian_fd(mean_fn, X: np.ndarray, h: float = HESSIAN_STEP) -> np.ndarray:
    """Hessians `(m, d, d)` of `mean_fn` (`(k, d) -> (k,)`) at the rows of `X` by central differences:
    `H_ii = (f(x+h e_i) - 2 f(x) + f(x-h e_i)) / h^2`,
    `H_ij = (f(x+h e_i+h e_j) - f(x+h e_i-h e_j) - f(x-h e_i+h e_j) + f(x-h e_i-h e_j)) / (4 h^2)`,
    all `m (2 d^2 + 1)` evaluations in one call."""
    X = np.atleast_2d(np.asarray(X, dtype=float))
    m, d = X.shape
    E = h * np.eye(d)
    iu, ju = np.triu_indices(d, 1)
    offsets = [np.zeros((1, d)), E, -E,
               E[iu] + E[ju], E[iu] - E[ju], -E[iu] + E[ju], -E[iu] - E[ju]]
    O = np.vstack(offsets)  # (1 + 2d + 4p, d), p = d(d-1)/2
    f = mean_fn((X[:, None, :] + O[None, :, :]).reshape(-1, d)).reshape(m, len(O))
    p = len(iu)
    f0, fp, fm = f[:, 0], f[:, 1:1 + d], f[:, 1 + d:1 + 2 * d]
    H = np.zeros((m, d, d))
    H[:, np.arange(d), np.arange(d)] = (fp - 2.0 * f0[:, None] + fm) / h**2
    if p:
        a, b, c, e = (f[:, 1 + 2 * d + k * p:1 + 2 * d + (k + 1) * p] for k in range(4))
        off = (a - b - c + e) / (4.0 * h**2)
        H[:, iu, ju] = off
        H[:, ju, iu] = off
    return H


def complexity_factor(hessians: np.ndarray, floor: float = EIGEN_FLOOR) -> np.ndarray:
    """`C(x) = sum_i max(|eig_i(H(x))|, floor)` for Hessians `(m, d, d)`, `(m,)`."""
    eig = np.linalg.eigvalsh(0.5 * (hessians + np.swapaxes(hessians, -1, -2)))
    return np.maximum(np.abs(eig), floor).sum(axis=-1)


# ---------------------------------------------------------------------- value objects
@dataclass(frozen=True)
class UCB:
    """`mu + kappa sigma`: GP-UCB with `kappa = sqrt(beta_t)` or an adaptive / A-GP-UCB weight."""

    kappa: float
    #: True if `final` is costly: a finite set then finalizes only its best few by `score`.
    screened = False

    def score(self, mean, var) -> np.ndarray:
        return kappa_ucb(mean, var, self.kappa)

    def score_grad(self, mean, var, dmean, dvar) -> tuple[np.ndarray, np.ndarray]:
        return kappa_ucb_grad(mean, var, dmean, dvar, self.kappa)

    def final(self, points, mean, var) -> np.ndarray:
        return self.score(mean, var)

    def partials(self, mean, sd) -> tuple[np.ndarray, ...]:
        """`a(mu, sigma) = mu + kappa sigma` and its partials `(a, a_mu, a_sigma, a_mu_mu,
        a_mu_sigma, a_sigma_sigma)` (the Newton polish, `tvbod.core.newton`)."""
        one, zero = np.ones_like(mean), np.zeros_like(mean)
        return mean + self.kappa * sd, one, self.kappa * one, zero, zero, zero


@dataclass(frozen=True)
class EI:
    """Expected improvement over `best` (the posterior mean's maximum on the data) by `xi`."""

    best: float
    xi: float = 0.0
    screened = False

    def score(self, mean, var) -> np.ndarray:
        return expected_improvement(mean, var, self.best, self.xi)

    def score_grad(self, mean, var, dmean, dvar) -> tuple[np.ndarray, np.ndarray]:
        return expected_improvement_grad(mean, var, dmean, dvar, self.best, self.xi)

    def final(self, points, mean, var) -> np.ndarray:
        return self.score(mean, var)

    def partials(self, mean, sd) -> tuple[np.ndarray, ...]:
        """EI as `a(mu, sigma)` and its partials (as `UCB.partials`): `a_mu = Phi(z)`,
        `a_sigma = phi(z)`, `a_mu_mu = phi / sigma`, `a_mu_sigma = -z phi / sigma`,
        `a_sigma_sigma = z^2 phi / sigma`; where sigma is 0, `max(mu - f* - xi, 0)` (its slope)."""
        imp = mean - self.best - self.xi
        ok = sd > 1e-12
        safe = np.where(ok, sd, 1.0)
        z = imp / safe
        pdf, cdf = _norm_pdf_cdf(z)
        zero = np.zeros_like(mean)
        value = np.where(ok, imp * cdf + sd * pdf, np.maximum(imp, 0.0))
        a_mu = np.where(ok, cdf, (imp > 0).astype(float))
        a_sd = np.where(ok, pdf, zero)
        curv = np.where(ok, pdf / safe, zero)
        return value, a_mu, a_sd, curv, -z * curv, z * z * curv


@dataclass(frozen=True)
class PenalizedUCB(UCB):
    """`mu + kappa sigma - lambda sigma^2 C(x)` (`penalized_ucb`). The smooth part is maximized;
    the penalty is scored only on the screened/polished points (`final`): `complexity(points)`
    needs the mean's Hessian, and its eigenvalue terms are not smooth for L-BFGS-B."""

    lam: float = 0.0
    complexity: Callable[[np.ndarray], np.ndarray] | None = None
    screened = True

    def final(self, points, mean, var) -> np.ndarray:
        return self.score(mean, var) - self.lam * var * self.complexity(points)
