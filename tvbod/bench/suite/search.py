"""The lowest cost over a box, for plants whose optimum has no closed form."""

from __future__ import annotations

import numpy as np


def search_best(f, lower: np.ndarray, upper: np.ndarray, points: int = 512, rounds: int = 20,
                batch: int = 32) -> float:
    """The lowest value of the vectorized `f` over the box: a scrambled Sobol screen (seed 0),
    then `rounds` batches of uniform perturbations around the best point so far, the radius
    halved whenever a batch finds nothing better. All batched, so one call costs ~`rounds`
    evaluations of `f` on `batch` rows."""
    from scipy.stats import qmc

    d, width = len(lower), upper - lower
    X = lower + qmc.Sobol(d, scramble=True, seed=0).random(points) * width
    v = f(X)
    x, best, radius = X[int(np.argmin(v))], float(np.min(v)), 0.1
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        Y = np.clip(x + rng.uniform(-radius, radius, (batch, d)) * width, lower, upper)
        w = f(Y)
        if float(np.min(w)) < best:
            x, best = Y[int(np.argmin(w))], float(np.min(w))
        else:
            radius /= 2.0
    return best
