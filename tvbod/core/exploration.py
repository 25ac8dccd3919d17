"""Exploration schedules of the GP-UCB family: small stateful objects, orthogonal to the reset policy.

- `FixedBeta`: `sqrt(beta_t)`, `beta_t = c1 ln(c2 t)` on the global step (the paper's schedule).
- `AdaptiveKappaLambda`: adaptive exploration weight and uncertainty penalty,
  `alpha_t(x) = mu_t(x) + kappa_t sigma_t(x) - lambda_t U_t(x)`, `U_t = sigma_t^2 C_t`:
  `kappa_{t+1} = clip(kappa_t exp(beta (Delta_t - Deltabar) / Deltabar), kappa_min, kappa_max)`,
  `lambda_{t+1} = clip(lambda_t (1 + gamma (I_t - Ibar) / Ibar), 0, lambda_max)`.
- `AGPUCBScaling`: A-GP-UCB (Berkenkamp, Schoellig, Krause, JMLR 2019): lengthscales shrink by
  `g(t) = h(t)`, the norm bound grows by `b(t)`, and `h(t)` (non-decreasing) is the smallest value
  at which an estimate of the regret reaches the sublinear reference `p(t) = t^rho`.

All share one protocol (`Exploration`): `kappa(t)`, the UCB weight of the ask at step `t`;
`penalty()`, the uncertainty penalty's `lambda` (0: plain UCB); `after_tell(told, model)`, the
update after a tell's reset/append, returning the lengthscales the kernel must use from now on
(None: unchanged); `on_reset()`; and `state_dict`/`load_state_dict` (plain data, exact; empty for
`FixedBeta`, whose strategy state has no `exploration` entry). The strategy owns the GP and passes
numbers in. See docs/configuration.md, *Exploration*, for the reset semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .acquisition import beta_t

#: Below this a moving average counts as zero (a perfect fit): the update is skipped.
_TINY = 1e-12


@dataclass(frozen=True)
class Told:
    """What a tell left for the exploration update: step `t`, the measurement `yi` and the
    prediction `mu` on the GP's scale, whether D was `reset`, and |D| before the tell."""

    t: int
    yi: float
    mu: float
    reset: bool
    n_before: int


class Model(Protocol):
    """What an exploration update may read of its strategy."""

    @property
    def dataset_size(self) -> int: ...

    def integrated_variance(self, t: int) -> float: ...

    def regret_estimate(self, t: int) -> Callable[[float], float]: ...


class Exploration:
    """The protocol, with the defaults of a schedule that keeps no state (`FixedBeta`)."""

    kind = "fixed"

    def kappa(self, t: int) -> float:
        raise NotImplementedError

    def penalty(self) -> float:
        """`lambda` of the penalty `lambda sigma^2 C(x)` (`acquisition.PenalizedUCB`); 0: none."""
        return 0.0

    def after_tell(self, told: Told, model: Model) -> np.ndarray | None:
        """Update after a tell; the lengthscales the kernel must use now, or None (unchanged)."""
        return None

    def on_reset(self) -> None:
        """Forget what is about the old dataset (nothing, by default)."""

    def map_start(self) -> np.ndarray | None:
        """The lengthscales the MAP refit starts from (None: the kernel's, by default)."""
        return None

    def keep_map(self, lengthscales: np.ndarray) -> bool:
        """Offer the MAP fit; True if the exploration keeps it (the kernel then does not take it)."""
        return False

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


class FixedBeta(Exploration):
    """`kappa_t = sqrt(beta_t)`, `beta_t = c1 ln(c2 t)` on the global step (SafeOpt's habit: a
    constant is a schedule). A reset forgets nothing (unchanged ET-GP-UCB behaviour)."""

    kind = "fixed"

    def __init__(self, c1: float, c2: float) -> None:
        self.c1, self.c2 = float(c1), float(c2)

    def kappa(self, t: int) -> float:
        return math.sqrt(beta_t(t, self.c1, self.c2))


def _ema(avg: float | None, value: float, eta: float) -> float:
    """`avg <- (1 - eta) avg + eta value`; the first value starts the average (`avg is None`)."""
    return value if avg is None else (1.0 - eta) * avg + eta * value


class AdaptiveKappaLambda(Exploration):
    """State and updates of the adaptive `kappa_t` (exploration) and `lambda_t` (penalty).

    Start: `Deltabar_0 = 0` is read as *no average yet* (`None`): the first surprise `Delta_1`
    initializes the average and leaves `kappa` unchanged, and an update is skipped whenever the
    average is below 1e-12, so the ratio never divides by zero. The same holds for `Ibar`. Each
    update compares the new value with the average of the *previous* values, then folds it in.
    """

    kind = "adaptive"

    def __init__(self, kappa0: float, lambda0: float, kappa_min: float, kappa_max: float,
                 lambda_max: float, kappa_rate: float = 0.1, lambda_rate: float = 0.05,
                 eta: float = 0.1) -> None:
        self.kappa_min, self.kappa_max, self.lambda_max = kappa_min, kappa_max, lambda_max
        self.kappa_rate, self.lambda_rate, self.eta = kappa_rate, lambda_rate, eta
        self.kappa_ = float(min(max(kappa0, kappa_min), kappa_max))
        self.lambda_ = float(min(max(lambda0, 0.0), lambda_max))
        self.delta_bar_: float | None = None
        self.i_bar_: float | None = None

    def kappa(self, t: int) -> float:
        return self.kappa_

    def penalty(self) -> float:
        return self.lambda_

    def after_tell(self, told: Told, model: Model) -> None:
        """`kappa` from the surprise `Delta_t = |y_t - mu_{t-1}(x_t)|` (it needs a posterior: not
        on a reset or an empty D), `lambda` from the integrated variance of the next step."""
        if not told.reset and told.n_before > 0:
            self.update_kappa(abs(told.yi - told.mu))
        if model.dataset_size:
            self.update_lambda(model.integrated_variance(told.t + 1))
        return None

    def update_kappa(self, delta: float) -> float:
        """`kappa <- clip(kappa exp(beta (Delta - Deltabar) / Deltabar))`, `Delta = |y_t - mu_{t-1}(x_t)|`."""
        avg = self.delta_bar_
        if avg is not None and avg > _TINY:
            # the exponent is capped (an outlier must not overflow; kappa is clipped anyway)
            k = self.kappa_ * math.exp(min(self.kappa_rate * (delta - avg) / avg, 50.0))
            self.kappa_ = float(min(max(k, self.kappa_min), self.kappa_max))
        self.delta_bar_ = _ema(avg, float(delta), self.eta)
        return self.kappa_

    def update_lambda(self, integrated_var: float) -> float:
        """`lambda <- clip(lambda (1 + gamma (I - Ibar) / Ibar), 0, lambda_max)`; once 0 it stays 0."""
        avg = self.i_bar_
        if avg is not None and avg > _TINY:
            lam = self.lambda_ * (1.0 + self.lambda_rate * (integrated_var - avg) / avg)
            self.lambda_ = float(min(max(lam, 0.0), self.lambda_max))
        self.i_bar_ = _ema(avg, float(integrated_var), self.eta)
        return self.lambda_

    def on_reset(self) -> None:
        """Keep `kappa`, `lambda` (they measure the noise/misfit level and the problem's scale); forget
        the moving averages: the new dataset's posterior starts at the prior, so its integrated
        variance and surprises are not comparable with the old dataset's."""
        self.delta_bar_ = None
        self.i_bar_ = None

    def state_dict(self) -> dict:
        return {"kappa": self.kappa_, "lambda": self.lambda_, "delta_bar": self.delta_bar_,
                "i_bar": self.i_bar_}

    def load_state_dict(self, state: dict) -> None:
        self.kappa_, self.lambda_ = float(state["kappa"]), float(state["lambda"])
        d, i = state["delta_bar"], state["i_bar"]
        self.delta_bar_ = None if d is None else float(d)
        self.i_bar_ = None if i is None else float(i)


# ---------------------------------------------------------------------- A-GP-UCB
def scaled_lengthscales(theta_map: np.ndarray, theta0: np.ndarray, g: float, rule: str) -> np.ndarray:
    """The lengthscales A-GP-UCB uses (elementwise): `min(theta_MAP, theta_0 / g)` (`rule="min"`) or
    `theta_MAP / g` (`rule="divide"`)."""
    theta_map = np.asarray(theta_map, dtype=float)
    if rule == "min":
        return np.minimum(theta_map, np.asarray(theta0, dtype=float) / g)
    if rule == "divide":
        return theta_map / g
    raise ValueError(f"unknown scaling rule {rule!r}")


def norm_growth(t: int) -> float:
    """`b(t) = log2(t + 1)`: 1 at `t = 1`, unbounded and sublinear (A-GP-UCB needs b -> inf)."""
    return math.log2(max(t, 1) + 1.0)


def bound_regret_estimate(h: float, t: int, dim: int, norm_bound: float, constant: float = 1.0) -> float:
    """The cheap bound-based estimate (no kernel inversion), `R(h) = C B_t(h) sqrt(t gamma_t(h))`
    with `B_t(h) = b(t) h^(d/2) B_0` (the norm bound after shrinking the lengthscales by `h`,
    Berkenkamp et al. 2019, Lemma 4) and the SE information gain `gamma_t(h) = h^d ln(1+t)^(d+1)`."""
    b = norm_growth(t) * h ** (dim / 2.0) * norm_bound
    return constant * b * math.sqrt(t * h**dim * math.log1p(t) ** (dim + 1))


def one_step_regret_estimate(sqrt_betas: np.ndarray, one_step_sigmas: np.ndarray) -> float:
    """The one-step-ahead estimate `sum_j 2 beta_j^(1/2) sigma_j(x_{j+1})`."""
    return float(2.0 * np.sum(np.asarray(sqrt_betas) * np.asarray(one_step_sigmas)))


def line_search_h(estimate: Callable[[float], float], target: float, h_prev: float,
                  h_max: float, iters: int = 40) -> float:
    """Smallest `h in [h_prev, h_max]` with `estimate(h) >= target` (estimate non-decreasing in h),
    by bisection on `log h`; `h_prev` if it already reaches the target, `h_max` if nothing does.
    The result is never below `h_prev`: `h(t)` is non-decreasing."""
    if estimate(h_prev) >= target:
        return h_prev
    if estimate(h_max) < target:
        return h_max
    lo, hi = math.log(h_prev), math.log(h_max)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if estimate(math.exp(mid)) >= target:
            hi = mid
        else:
            lo = mid
    return max(math.exp(hi), h_prev)


class AGPUCBScaling(Exploration):
    """A-GP-UCB's clock `tau` (tells since the last reset), scaling `h = g`, and the MAP lengthscales.

    `sqrt(beta_t) = b(tau) h^(d/2) B_0 + sqrt(c1 ln(c2 t))`: the norm-bound term of Berkenkamp et al.
    (2019, Alg. 1) plus the configured GP-UCB schedule `base` (a `FixedBeta`; None: no such term)
    standing in for the information-gain term. The estimators of `h` are in `tvbod.core.agpucb`.
    """

    kind = "agpucb"

    def __init__(self, theta0, norm_bound: float, exponent: float = 0.9, rule: str = "min",
                 estimator: str = "one-step", h_max: float = 100.0, sigma_floor: float = 0.1,
                 bound_constant: float = 1.0, base: FixedBeta | None = None) -> None:
        self.base = base
        self.theta0 = np.asarray(theta0, dtype=float).copy()
        self.norm_bound, self.exponent, self.rule = norm_bound, exponent, rule
        self.estimator, self.h_max, self.sigma_floor = estimator, h_max, sigma_floor
        self.bound_constant = bound_constant
        self.h_ = 1.0
        self.tau_ = 0
        self.theta_map_ = self.theta0.copy()

    @property
    def dim(self) -> int:
        return len(self.theta0)

    def reference(self, tau: int) -> float:
        """`p(tau) = tau^rho`, the sublinear regret reference."""
        return float(max(tau, 1)) ** self.exponent

    def norm_term(self, h: float | None = None) -> float:
        h = self.h_ if h is None else h
        return norm_growth(max(self.tau_, 1)) * h ** (self.dim / 2.0) * self.norm_bound

    def lengthscales(self, h: float | None = None) -> np.ndarray:
        return scaled_lengthscales(self.theta_map_, self.theta0, self.h_ if h is None else h,
                                   self.rule)

    def kappa(self, t: int) -> float:
        return (0.0 if self.base is None else self.base.kappa(t)) + self.norm_term()

    def after_tell(self, told: Told, model: Model) -> np.ndarray:
        """Advance the clock and `h` (only with data: the estimates need a posterior); the kernel
        uses the scaled lengthscales from now on."""
        if model.dataset_size:
            self.advance(model.regret_estimate(told.t))
        return self.lengthscales()

    def map_start(self) -> np.ndarray:
        return self.theta_map_  # warm start from the MAP, not the scaled theta_t

    def keep_map(self, lengthscales: np.ndarray) -> bool:
        self.theta_map_ = lengthscales  # theta_t follows in after_tell
        return True

    def advance(self, estimate: Callable[[float], float] | None) -> float:
        """One tell: `tau += 1`, then `h <- smallest h >= h_prev with estimate(h) >= p(tau)`.

        `estimate(h)` is the regret estimate (or, for the Wang & de Freitas variant, the
        `sigma_t(x_{t+1})` check) with lengthscales `self.lengthscales(h)`; None skips the search.
        """
        self.tau_ += 1
        if estimate is not None:
            target = self.sigma_floor if self.estimator == "sigma-floor" else self.reference(self.tau_)
            self.h_ = line_search_h(estimate, target, self.h_, self.h_max)
        return self.h_

    def on_reset(self) -> None:
        """A reset starts a new dataset, and A-GP-UCB's schedules are about one dataset: `tau` counts
        from the reset (`t'`), `h` restarts at 1 (the MAP estimate is kept as the warm start)."""
        self.tau_ = 0
        self.h_ = 1.0

    def state_dict(self) -> dict:
        return {"h": self.h_, "tau": self.tau_, "theta_map": self.theta_map_.tolist()}

    def load_state_dict(self, state: dict) -> None:
        theta = np.asarray(state["theta_map"], dtype=float).reshape(-1)
        if theta.shape != self.theta0.shape:
            raise ValueError("theta_map does not fit the kernel")
        self.h_, self.tau_, self.theta_map_ = float(state["h"]), int(state["tau"]), theta
