"""A-GP-UCB's estimators (Berkenkamp, Schoellig, Krause, JMLR 2019): `h -> estimate` functions for
the line search of `exploration.AGPUCBScaling.advance`, each a GP posterior under the lengthscales
scaled by `h` (`ExactGP` on the current dataset, in kernel coordinates).

- `bound`: the cheap bound-based regret estimate (no kernel inversion);
- `one-step`: `sum_j 2 beta_j^(1/2) sigma_j(x_{j+1})`, the one-step-ahead posterior std at each
  data point given the points before it (the factor's pivots);
- `sigma-floor` (Wang & de Freitas): `sigma_t(x_{t+1})` at the UCB maximizer over a candidate set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import NumericalError
from .exploration import (AGPUCBScaling, bound_regret_estimate, norm_growth,
                          one_step_regret_estimate)
from .gp import ExactGP


@dataclass(frozen=True)
class EstimatorData:
    """The dataset and model an estimate is computed on.

    `X` `(n, d)` kernel coordinates, `y` the GP's targets, `times` their steps, `kernel` the spatial
    base kernel (its lengthscales are replaced), `temporal` the GP's temporal factor (or None),
    `noise_variance` the configured `sigma_n^2`, `candidates` the sigma-floor check set (kernel
    coordinates). The `sqrt(beta_t)` schedule is the scaling's `base`."""

    X: np.ndarray
    y: np.ndarray
    times: np.ndarray
    kernel: object
    temporal: object
    noise_variance: float
    candidates: np.ndarray


def regret_estimate(scaling: AGPUCBScaling, data: EstimatorData, t: int) -> Callable[[float], float]:
    """`h -> estimate` of `scaling.estimator` after the tell of step `t`."""
    if scaling.estimator == "bound":
        d = data.X.shape[1]
        return lambda h: bound_regret_estimate(h, scaling.tau_, d, scaling.norm_bound,
                                               scaling.bound_constant)
    if scaling.estimator == "one-step":
        return _one_step(scaling, data)
    return _sigma_floor(scaling, data, t)


def _scaled_gp(scaling: AGPUCBScaling, data: EstimatorData, h: float, temporal) -> ExactGP | None:
    """The GP on D under the lengthscales of scaling `h`, factorized without jitter (None if that
    is not positive definite: the estimate is then infinite)."""
    gp = ExactGP(data.kernel.with_lengthscales(scaling.lengthscales(h)), data.noise_variance,
                 temporal)
    try:
        gp.fit(data.X, data.y, data.times, jitter=0.0)
    except NumericalError:
        return None
    return gp


def _one_step(scaling: AGPUCBScaling, data: EstimatorData) -> Callable[[float], float]:
    n, d = data.X.shape
    base = np.array([scaling.base.kappa(int(s)) for s in data.times])
    growth = np.array([norm_growth(j) for j in range(1, n + 1)]) * scaling.norm_bound

    def one_step(h: float) -> float:
        gp = _scaled_gp(scaling, data, h, data.temporal)
        if gp is None:
            return math.inf
        return one_step_regret_estimate(base + growth * h ** (d / 2.0),
                                        np.sqrt(gp.one_step_variances()))

    return one_step


def _sigma_floor(scaling: AGPUCBScaling, data: EstimatorData, t: int) -> Callable[[float], float]:
    """Smallest scaling with `sigma_t(x_{t+1}) >= sigma_floor`, `x_{t+1}` the UCB maximizer over
    the candidates under the scaled lengthscales (the spatial kernel only, as in the original)."""
    base = scaling.base.kappa(t + 1)

    def sigma_next(h: float) -> float:
        gp = _scaled_gp(scaling, data, h, None)
        if gp is None:
            return math.inf
        mean, var = gp.predict(data.candidates)
        sd = np.sqrt(var)
        return float(sd[int(np.argmax(mean + (base + scaling.norm_term(h)) * sd))])

    return sigma_next
