"""The within-model benchmark's objective: time-varying GP sample paths on a grid (Bogunovic et al.
2016, B2P model) and the regret against them."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

GRID = 50
LENGTHSCALE = 0.2
#: Jitter of the sampler's Cholesky factor (escalated x10, x100 if the Gram matrix needs it).
SAMPLER_JITTER = 1e-6


@lru_cache(maxsize=2)
def grid_points(n: int = GRID) -> np.ndarray:
    """The `n x n` grid over `[0, 1]^2`, `(n^2, 2)`; row `i * n + j` is `(i, j) / (n - 1)`."""
    g = np.linspace(0.0, 1.0, n)
    a, b = np.meshgrid(g, g, indexing="ij")
    return np.column_stack([a.ravel(), b.ravel()])


def grid_index(x: np.ndarray, n: int = GRID) -> int:
    """Row of grid point `x` `(2,)` in `grid_points(n)`."""
    i, j = np.rint(np.asarray(x, dtype=float) * (n - 1)).astype(int)
    return int(i * n + j)


@lru_cache(maxsize=2)
def sampler_factor(n: int = GRID, lengthscale: float = LENGTHSCALE,
                   jitter: float = SAMPLER_JITTER) -> np.ndarray:
    """Lower `L` with `L L^T = K + jitter I`, `K` the SE Gram matrix (variance 1) on the grid."""
    from scipy.linalg import cholesky

    from tvbod.core.kernels import SquaredExponential

    P = grid_points(n)
    K = SquaredExponential([lengthscale, lengthscale], 1.0)(P, P)
    for j in (jitter, 10 * jitter, 100 * jitter):
        try:
            return cholesky(K + j * np.eye(len(K)), lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError(
        f"grid Gram matrix not positive definite with jitter {100 * jitter}; raise SAMPLER_JITTER")


def sample_functions(L: np.ndarray, eps: float, horizon: int,
                     rng: np.random.Generator) -> np.ndarray:
    """`F` `(horizon, m)`: `f_1 = g_1`, `f_t = sqrt(1-eps) f_{t-1} + sqrt(eps) g_t`, `g_t = L z_t`.

    Each `f_t` is marginally `GP(0, K)` and `corr(f_t, f_{t-1}) = sqrt(1 - eps)` pointwise.
    """
    G = (L @ rng.standard_normal((L.shape[0], horizon))).T
    F = np.empty_like(G)
    F[0] = G[0]
    a, b = math.sqrt(1.0 - eps), math.sqrt(eps)
    for t in range(1, horizon):
        F[t] = a * F[t - 1] + b * G[t]
    return F


def regret(F: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Instantaneous regret `r_t = max f_t - f_t(x_t)`, `(horizon,)`, for grid indices `idx`."""
    return F.max(axis=1) - F[np.arange(len(idx)), idx]
