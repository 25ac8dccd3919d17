"""Grid fits of one scalar by marginal likelihood: the forgetting rate `eps` (`forgetting_floor:
auto`) and the noise variance sigma_n^2 (`noise_variance: auto`). An argmax over fixed values,
so the choice is the same on every machine unless two values tie to round-off."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs


#: `forgetting_floor: auto`: the forgetting rates `fit_forgetting` chooses among: none, and 40
#: log-spaced from 1e-3 (a factor of 0.95 after 100 steps) to 0.3 (0.84 per step). A grid, not a
#: local search: the marginal likelihood in eps is often flat or two-humped on a few points, and
#: an argmax over fixed values is the same on every machine unless two values tie to round-off.
FORGETTING_GRID = (0.0, *np.geomspace(1e-3, 0.3, 40).tolist())


def forgetting_log_likelihoods(K: np.ndarray, y: np.ndarray, times: np.ndarray,
                               noise_variance: float,
                               grid: tuple[float, ...] = FORGETTING_GRID) -> np.ndarray:
    """`log p(y | K o T_eps + sigma_n^2 I)` up to its constant `-n/2 log 2 pi`, for each `eps` of
    `grid` (`-inf` where the matrix does not factor); see `fit_forgetting`.

    One Cholesky per value of the grid, all in two (n, n) work arrays allocated once: the
    elementwise products in a C-ordered one, copied into a Fortran-ordered one that `dpotrf`
    factors in place. Each value is computed exactly as from a fresh `K * T_eps` (the same
    products, the same lower triangle into LAPACK; at eps = 0, `K * exp(0) = K` bit for bit), only
    without the n x n temporaries each value would otherwise allocate."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    half_dt = 0.5 * np.abs(np.subtract.outer(times, times))
    work = np.empty((n, n))
    factor = np.empty((n, n), order="F")
    diagonal = factor.reshape(-1, order="F")[:: n + 1]  # a view of the factor's diagonal
    values = np.full(len(grid), -math.inf)
    for i, eps in enumerate(grid):
        np.multiply(half_dt, math.log1p(-eps), out=work)
        np.exp(work, out=work)
        np.multiply(K, work, out=work)
        factor[...] = work
        diagonal += noise_variance
        L, info = dpotrf(factor, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            continue
        alpha, _ = dpotrs(L, y, lower=1)
        values[i] = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum())
    return values


def fit_forgetting(K: np.ndarray, y: np.ndarray, times: np.ndarray, noise_variance: float,
                   grid: tuple[float, ...] = FORGETTING_GRID) -> float:
    """The forgetting rate `eps` of `grid` that maximizes the marginal likelihood
    `log p(y | K o T_eps + sigma_n^2 I)` (RW2006 eq. 5.8) of the dataset, with `K` `(n, n)` its
    spatial covariance and `T_eps = (1 - eps)^(|t_i - t_j| / 2)` TV-GP-UCB's temporal factor
    (Bogunovic et al. 2016): the drift rate the data since the last reset show, for ET-GP-UCB's
    `forgetting_floor: auto`. A flat prior on the grid; ties (one point says nothing about eps)
    go to the smallest eps; a value whose matrix does not factor is skipped."""
    if len(y) < 2:
        return float(grid[0])
    values = forgetting_log_likelihoods(K, y, times, noise_variance, grid)
    values[np.isnan(values)] = -math.inf  # a value that is not a number is never the best
    return float(grid[int(np.argmax(values))])  # the first maximum: ties go to the smallest eps


#: `noise_variance: auto`: the smallest noise variance it may pick (the fixed default's value) and
#: the grid's size between it and the signal variance 1 (log-spaced).
NOISE_FLOOR, NOISE_GRID_POINTS = 0.02, 97


def noise_log_likelihoods(K: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """`log p(y | K + sigma_n^2 I)` up to its constant `-n/2 log 2 pi` for each `sigma_n^2` of
    `grid` (RW2006 eq. 5.8), from one eigendecomposition `K = Q diag(l) Q^T`: with `z = Q^T y`,
    `-1/2 sum_i (z_i^2 / (l_i + s) + log(l_i + s))`."""
    lam, Q = np.linalg.eigh(np.asarray(K, dtype=float))
    lam = np.clip(lam, 0.0, None)  # round-off below zero on a PSD matrix
    z2 = (Q.T @ np.asarray(y, dtype=float)) ** 2
    s = lam[None, :] + np.asarray(grid, dtype=float)[:, None]
    return -0.5 * np.sum(z2[None, :] / s + np.log(s), axis=1)


def fit_noise(K: np.ndarray, y: np.ndarray, floor: float = NOISE_FLOOR,
              points: int = NOISE_GRID_POINTS) -> float:
    """`noise_variance: auto`: the noise variance of a log-spaced grid from `floor` to 1 (the
    signal variance) that maximizes the marginal likelihood of the calibration data `y` under the
    spatial covariance `K` (a flat prior on the grid; ties go to the smaller value). The floor
    keeps the trigger's band where the fixed default puts it on a plant whose first
    measurements show little noise; a plant whose first measurements are mostly noise gets a
    noise variance that says so, instead of a band that every repeat measurement breaks."""
    if len(y) < 2:
        return float(floor)
    grid = np.geomspace(floor, 1.0, points)
    return float(grid[int(np.argmax(noise_log_likelihoods(K, y, grid)))])
