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
    i = int(np.argmax(data_mean(gp, float(strategy.t))))
    mean, var = gp.predict(gp.X_[i:i + 1], float(strategy.t))
    return Recommendation(
        x=strategy.domain.to_physical(gp.X_[i]),
        mean=float(output.to_measurement(float(mean[0]))),
        std=float(np.sqrt(var[0])) * output.scale_,
        t=strategy.t, measured_at=int(gp.times_[i]), dataset_size=gp.n)


def data_mean(gp, t: float) -> np.ndarray:
    """The posterior mean at every point of D for step `t`.

    Without a temporal factor the prior covariance of D is the factorized matrix less its
    diagonal `(sigma_n^2 + jitter) I`, so `mu(X) = K alpha = y - (sigma_n^2 + jitter) alpha`
    (RW2006 eq. 2.25 at the training inputs): O(n) instead of the O(n^2 d) kernel and O(n^3)
    solve of a full prediction, which the daemon would otherwise pay after every tell. A
    temporal factor makes the prior at step `t` differ from the data's: predicted in full."""
    if gp.temporal is not None:
        return gp.predict(gp.X_, t)[0]
    return gp.y_ - (gp.noise_variance + gp.jitter_) * gp.alpha_
