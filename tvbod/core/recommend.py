"""The recommendation rule: which gains to deploy now.

`recommend(strategy)` is the point of the current dataset D with the highest posterior mean of
the objective for the next step (on the GP's internal scale, so the best in the plant's `sense`:
the lowest predicted cost when minimizing), with that mean and the posterior standard deviation in
measurement units. Only measured points are candidates: a point the plant has run is the safe
choice, the posterior mean there averages the measurement noise out, and after a reset D holds
only what was measured since the change. On arms the answer is an arm. Ties go to the point that
entered D first. A strategy without a model (random search) or an empty D recommends nothing.

Under `safety:` only points the safe set certifies (`tvbod.core.safety`) are candidates; when
none is, the point of D with the highest safety lower bound, reported with `certified` False.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .strategies import GPUCBStrategy, Strategy


@dataclass(frozen=True)
class Recommendation:
    """`x` (physical units), its posterior `mean` and `std` (measurement units), the step `t`
    the prediction is for, the step `measured_at` when x entered D, and `dataset_size`."""

    x: np.ndarray
    mean: float
    std: float
    t: int
    measured_at: int
    dataset_size: int
    #: under `safety:`, whether the safe set certifies `x` (None without safety)
    certified: bool | None = None


def recommend(strategy: Strategy) -> Recommendation | None:
    """The posterior-mean maximizer over the current dataset's points, or None (see above)."""
    if not isinstance(strategy, GPUCBStrategy) or strategy.gp.n == 0:
        return None
    strategy.settle()
    gp, output, t = strategy.gp, strategy.output, strategy.t
    score, certified = gp.data_mean(float(t)), None
    if strategy.safety is not None:
        sf = strategy._sigma_f
        ok = strategy.safety.certified(gp, gp.X_, t, output, sf)
        certified = bool(ok.any())
        score = (np.where(ok, score, -np.inf) if certified
                 else strategy.safety.lower_bound(gp, gp.X_, t, output, sf))
    i = int(np.argmax(score))
    mean, var = gp.predict(gp.X_[i:i + 1], float(strategy.t))
    return Recommendation(
        x=strategy.domain.to_physical(gp.X_[i]),
        mean=float(output.to_measurement(float(mean[0]))),
        std=float(np.sqrt(var[0])) * output.scale_,
        t=strategy.t, measured_at=int(gp.times_[i]), dataset_size=gp.n, certified=certified)
