"""Maximizing the acquisition: scrambled Sobol candidates scored in one vectorized pass, then a
batched L-BFGS-B polish from the best few (box); exhaustive scoring (finite sets)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .acquisition import ucb, ucb_grad
from .sobol import MAX_DIM, scrambled_sobol


@dataclass(frozen=True)
class Budget:
    """How hard the box optimizer works: Sobol `candidates`, L-BFGS-B `starts`, and `maxiter`."""

    candidates: int = 1024
    starts: int = 5
    maxiter: int = 50


def sobol_unit(dim: int, n: int, seed: int) -> np.ndarray:
    """`n` scrambled, seeded Sobol points in `[0, 1)^dim`: the first `n` of
    `scipy.stats.qmc.Sobol(dim, scramble=True, seed=seed).random_base2(m)`, bit for bit, from the
    vendored generator (tvbod/core/sobol.py) up to its `MAX_DIM`, so a start does not pay for
    importing scipy.stats (~1 s); scipy itself (imported lazily) above that."""
    m = max(int(np.ceil(np.log2(max(n, 2)))), 1)
    if dim <= MAX_DIM:
        return scrambled_sobol(dim, m, seed)[:n]
    from scipy.stats import qmc

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
    They are ranked in float32 (`gp.screen_best`: the top `starts` without solving for every
    candidate), the best `starts` are polished together as one L-BFGS-B problem (the sum of
    separable objectives), and the winner is chosen on float64 values.
    """
    span = upper - lower
    cands = lower + np.mod(unit_candidates + shift, 1.0) * span
    if extra is not None and len(extra):
        cands = np.vstack([cands, np.clip(extra, lower, upper)])
    k = min(budget.starts, len(cands))
    starts = cands[gp.screen_best(cands, t_query, lambda mean, var: ucb(mean, var, beta), k)]
    if budget.maxiter > 0 and gp.n > 0:
        points, values = _polish(gp, t_query, beta, starts, lower, upper, budget.maxiter)
    else:
        points, values = starts, ucb(*gp.predict(starts, t_query), beta)
    best = int(np.argmax(values))
    return points[best].copy(), float(values[best])


def _polish(gp, t_query, beta, starts, lower, upper, maxiter) -> tuple[np.ndarray, np.ndarray]:
    """L-BFGS-B on the sum of the UCB at all `starts` (separable, so one problem polishes them all).

    Returns the starts and their polished ends, `(2k, d)`, with float64 UCB values `(2k,)`. The
    values come from the objective's own evaluations at `x0` and at the returned `x` (the same
    float64 posterior as `gp.predict`), re-computed only if L-BFGS-B returned a point it did not
    evaluate.
    """
    k, d = starts.shape
    seen: dict[bytes, np.ndarray] = {}

    def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = ucb_grad(*gp.predict_with_grad(flat.reshape(k, d), t_query), beta)
        seen[flat.tobytes()] = value
        return -float(value.sum()), -grad.ravel()

    res = minimize(
        objective,
        starts.ravel(),
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(np.tile(lower, k), np.tile(upper, k))),
        options={"maxiter": maxiter},
    )
    polished = np.clip(res.x.reshape(k, d), lower, upper)
    points = np.vstack([starts, polished])
    v0, v1 = seen.get(starts.tobytes()), seen.get(polished.tobytes())
    if v0 is None or v1 is None:
        return points, ucb(*gp.predict(points, t_query), beta)
    return points, np.concatenate([v0, v1])


def maximize_ucb_on_set(mean: np.ndarray, var: np.ndarray, beta: float) -> tuple[int, float]:
    """Exhaustive maximum over a finite set; ties go to the lowest index.

    "Tie" means within `1e-12` (relative) of the maximum: points mirrored around a single data
    point tie exactly in exact arithmetic but differ in the last bits, and which one wins must not
    depend on round-off (or results would change with the BLAS build).
    """
    score = ucb(mean, var, beta)
    top = float(np.max(score))
    i = int(np.flatnonzero(score >= top - 1e-12 * max(1.0, abs(top)))[0])
    return i, float(score[i])
