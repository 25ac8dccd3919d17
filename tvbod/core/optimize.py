"""Maximizing an acquisition: scrambled Sobol candidates scored in one vectorized pass, then a
batched L-BFGS-B polish from the best few (box); exhaustive scoring (finite sets).

One maximizer per domain kind, each taking any acquisition value object (`UCB`, `EI`,
`PenalizedUCB` in `tvbod.core.acquisition`: `score`, `score_grad`, `final`), so every
acquisition gets the same candidates, polish and, on finite sets, the same tie rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sobol import MAX_DIM, scrambled_sobol

#: Scores within this (relative) of the maximum tie on a finite set; the lowest index wins.
TIE_TOLERANCE = 1e-12
#: `budget.polish`: one L-BFGS-B problem for all starts (the default), or the
#: projected Newton ascent of every start at once (`tvbod.core.newton`; opt-in: docs/benchmarks.md,
#: *Latency*, for its effect on the cart-pole's regret).
POLISHES = ("lbfgsb-joint", "newton")
#: `budget.tolerance`: a polish stops when a step gains less than this times `max(1, |value|)`.
#: 1e-5 of an acquisition value is ~1e-4 of the noise sd at the default noise: the point moves
#: within a flat top, the value it reaches does not (docs/benchmarks.md, *The core*).
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Budget:
    """How hard the box optimizer works: Sobol `candidates`, polish `starts` and `maxiter`
    (iterations per polish), the `polish` (`POLISHES`) and its improvement `tolerance`."""

    candidates: int = 1024
    starts: int = 5
    maxiter: int = 50
    polish: str = "lbfgsb-joint"
    tolerance: float = TOLERANCE


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


def maximize_on_box(
    gp,
    t_query: float,
    acq,
    lower: np.ndarray,
    upper: np.ndarray,
    unit_candidates: np.ndarray,
    shift: np.ndarray,
    budget: Budget,
    extra: np.ndarray | None = None,
    feasible=None,
) -> tuple[np.ndarray, float] | None:
    """Return `(z*, acq.final(z*))` over the box `[lower, upper]` (internal coordinates).

    Candidates are `unit_candidates` rotated by `shift` modulo 1 (a Cranley-Patterson rotation, so
    every step sees a fresh low-discrepancy set), plus `extra` points (e.g. the best data points).
    They are ranked by `acq.score` in float32 (`gp.screen_best`: the top `starts` without solving
    for every candidate), the best `starts` are polished (`budget.polish`: as one L-BFGS-B problem,
    the sum of separable objectives, or all at once by projected Newton, `tvbod.core.newton`), and
    the winner is chosen on float64 `acq.final` values among the starts and their polished ends.

    `feasible(points) -> bool mask` restricts the maximum to a subset (the safe set,
    `tvbod.core.safety`): candidates and polished ends outside it are dropped; None when no
    candidate is feasible.
    """
    span = upper - lower
    cands = lower + np.mod(unit_candidates + shift, 1.0) * span
    if extra is not None and len(extra):
        cands = np.vstack([cands, np.clip(extra, lower, upper)])
    if feasible is not None:
        cands = cands[feasible(cands)]
        if not len(cands):
            return None
    k = min(budget.starts, len(cands))
    starts = cands[gp.screen_best(cands, t_query, acq.score, k)]
    if budget.maxiter > 0 and gp.n > 0:
        polish = _polish
        if budget.polish == "newton":
            from . import newton  # scipy.linalg: only for a box ask that uses it

            if newton.supports(gp, acq):
                polish = newton.newton_polish
        points, mean, var = polish(gp, t_query, acq, starts, lower, upper, budget.maxiter,
                                   budget.tolerance)
    else:
        points, (mean, var) = starts, gp.predict(starts, t_query)
    values = acq.final(points, mean, var)
    if feasible is not None:
        values = np.where(feasible(points), values, -np.inf)
    best = int(np.argmax(values))
    return points[best].copy(), float(values[best])


def _polish(gp, t_query, acq, starts, lower, upper, maxiter, tolerance=TOLERANCE):
    """L-BFGS-B on the sum of `acq.score_grad` at all `starts` (separable: one problem for all),
    stopping when an iteration reduces the sum by less than `tolerance` relative (SciPy's `ftol`).

    Returns the starts and their polished ends `(2k, d)` with their float64 posterior mean and
    variance `(2k,)`, taken from the objective's own evaluations at `x0` and at the returned `x`
    (the same float64 posterior as `gp.predict`), re-computed only if L-BFGS-B returned a point it
    did not evaluate.
    """
    from .gp import predict_with_grad  # scipy.linalg: loaded at the first polish, as below

    k, d = starts.shape
    seen: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
        mean, var, dmean, dvar = predict_with_grad(gp, flat.reshape(k, d), t_query)
        value, grad = acq.score_grad(mean, var, dmean, dvar)
        seen[flat.tobytes()] = (mean, var)
        return -float(value.sum()), -grad.ravel()

    from scipy.optimize import minimize  # ~1 s of import: paid at the first polish, not at start

    res = minimize(
        objective,
        starts.ravel(),
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(np.tile(lower, k), np.tile(upper, k))),
        options={"maxiter": maxiter, "ftol": tolerance},
    )
    polished = np.clip(res.x.reshape(k, d), lower, upper)
    points = np.vstack([starts, polished])
    p0, p1 = seen.get(starts.tobytes()), seen.get(polished.tobytes())
    if p0 is None or p1 is None:
        return (points, *gp.predict(points, t_query))
    return points, np.concatenate([p0[0], p1[0]]), np.concatenate([p0[1], p1[1]])


def maximize_on_set(mean: np.ndarray, var: np.ndarray, acq, screen: int = Budget.starts
                    ) -> tuple[int, float]:
    """Exhaustive maximum of `acq` over a finite set; ties go to the lowest index.

    An acquisition whose final value is costly (`acq.screened`, e.g. `PenalizedUCB`) gives it
    only to the `screen` best by `acq.score`; otherwise every point is scored by `acq.final`.
    "Tie" means within `TIE_TOLERANCE` (relative) of the maximum: points mirrored around a single
    data point tie exactly in exact arithmetic but differ in the last bits, and which one wins must
    not depend on round-off (or results would change with the BLAS build).
    """
    index = np.arange(len(mean))
    if acq.screened and screen < len(mean):
        index = np.sort(np.argpartition(-acq.score(mean, var), screen - 1)[:screen])
    score = acq.final(index.astype(float)[:, None], mean[index], var[index])
    top = float(np.max(score))
    i = int(np.flatnonzero(score >= top - TIE_TOLERANCE * max(1.0, abs(top)))[0])
    return int(index[i]), float(score[i])
