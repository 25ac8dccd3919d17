"""The recommendation rule: which gains to deploy now.

`recommend(strategy)` is the point of the current dataset D with the highest posterior mean of
the objective for the next step (on the GP's internal scale, so the best in the plant's `sense`:
the lowest predicted cost when minimizing), with that mean and the posterior standard deviation in
measurement units. Only measured points are candidates: a point the plant has run is the safe
choice, the posterior mean there averages the measurement noise out, and after a reset D holds
only what was measured since the change. On arms the answer is an arm. Ties go to the point that
entered D first. A strategy without a model (random search) or an empty D recommends nothing.
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


def recommend(strategy: Strategy) -> Recommendation | None:
    """The posterior-mean maximizer over the current dataset's points, or None (see above)."""
    if not isinstance(strategy, GPUCBStrategy) or strategy.gp.n == 0:
        return None
    strategy.settle()
    gp, output = strategy.gp, strategy.output
    mean, var = gp.predict(gp.X_, float(strategy.t))
    i = int(np.argmax(mean))
    return Recommendation(
        x=strategy.domain.to_physical(gp.X_[i]),
        mean=float(output.to_measurement(float(mean[i]))),
        std=float(np.sqrt(var[i])) * output.scale_,
        t=strategy.t, measured_at=int(gp.times_[i]), dataset_size=gp.n)
