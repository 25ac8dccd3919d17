"""GP-UCB acquisition: `alpha(x) = mu_D(x) + sqrt(beta_t) sigma_D(x)` with `beta_t = c1 ln(c2 t)`."""

from __future__ import annotations

import math

import numpy as np


def beta_t(t: int, c1: float, c2: float) -> float:
    """Exploration weight `beta_t = c1 ln(c2 t)` at the global step `t >= 1` (clamped at 0)."""
    return max(c1 * math.log(c2 * t), 0.0)


def ucb(mean: np.ndarray, var: np.ndarray, beta: float) -> np.ndarray:
    """`mu + sqrt(beta) sigma`."""
    return mean + math.sqrt(beta) * np.sqrt(np.maximum(var, 0.0))


def ucb_grad(mean, var, dmean, dvar, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """UCB value and its gradient, `d sigma = d var / (2 sigma)` (zero where sigma is 0)."""
    sigma = np.sqrt(np.maximum(var, 0.0))
    value = mean + math.sqrt(beta) * sigma
    safe = np.where(sigma > 1e-12, sigma, np.inf)
    grad = dmean + math.sqrt(beta) * dvar / (2.0 * safe[:, None])
    return value, grad
