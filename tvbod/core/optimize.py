"""Maximizing the acquisition: scrambled Sobol candidates scored in one vectorized pass, then a
batched L-BFGS-B polish from the best few (box); exhaustive scoring (finite sets)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .acquisition import ucb, ucb_grad


@dataclass(frozen=True)
class Budget:
    """How hard the box optimizer works: Sobol `candidates`, L-BFGS-B `starts`, and `maxiter`."""

    candidates: int = 1024
    starts: int = 5
    maxiter: int = 50


def sobol_unit(dim: int, n: int, seed: int) -> np.ndarray:
    """`n` scrambled, seeded Sobol points in `[0, 1)^dim` (scipy.stats.qmc is imported lazily: ~0.7 s)."""
    from scipy.stats import qmc

    m = max(int(np.ceil(np.log2(max(n, 2)))), 1)
    return qmc.Sobol(dim, scramble=True, seed=seed).random_base2(m)[:n]


def maximize_ucb_on_box(
    gp,
    t_query: float,
    beta: float,
    lower: np.ndarray,
    upper: np.ndarray,
    unit_candidates: np.ndarray,
    shift: np.ndarray,
    budget: Budget,
    extra: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Return `(z*, ucb(z*))` over the box `[lower, upper]` (internal coordinates).

    Candidates are `unit_candidates` rotated by `shift` modulo 1 (a Cranley-Patterson rotation, so
    every step sees a fresh low-discrepancy set), plus `extra` points (e.g. the best data points).
    They are ranked in float32, the best `starts` are polished together as one L-BFGS-B problem
    (the sum of separable objectives), and the winner is re-scored in float64.
    """
    span = upper - lower
    cands = lower + np.mod(unit_candidates + shift, 1.0) * span
    if extra is not None and len(extra):
        cands = np.vstack([cands, np.clip(extra, lower, upper)])
    mean, var = gp.predict_screen(cands, t_query)
    score = ucb(mean, var, beta)
    k = min(budget.starts, len(cands))
    top = np.argpartition(-score, k - 1)[:k] if k < len(cands) else np.arange(len(cands))
    starts = cands[top]
    d = starts.shape[1]
    if budget.maxiter > 0 and gp.n > 0:
        def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
            Z = flat.reshape(k, d)
            value, grad = ucb_grad(*gp.predict_with_grad(Z, t_query), beta)
            return -float(value.sum()), -grad.ravel()

        res = minimize(
            objective,
            starts.ravel(),
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(np.tile(lower, k), np.tile(upper, k))),
            options={"maxiter": budget.maxiter},
        )
        polished = np.clip(res.x.reshape(k, d), lower, upper)
        starts = np.vstack([starts, polished])
    m, v = gp.predict(starts, t_query)
    exact = ucb(m, v, beta)
    best = int(np.argmax(exact))
    return starts[best].copy(), float(exact[best])


def maximize_ucb_on_set(mean: np.ndarray, var: np.ndarray, beta: float) -> tuple[int, float]:
    """Exhaustive maximum over a finite set; ties go to the lowest index."""
    score = ucb(mean, var, beta)
    i = int(np.argmax(score))
    return i, float(score[i])
