"""The GP-UCB family: one engine, three orthogonal choices.

- a **reset policy**: none (GP-UCB), periodic every N steps (R-GP-UCB, Bogunovic et al. 2016), or
  the event trigger (ET-GP-UCB, Brunzema et al. 2022; the decision: `trigger.decide`);
- a **temporal factor** on the kernel: none, TV-GP-UCB's forgetting `(1-eps)^(|t-t'|/2)`, or
  UI-TVBO's Wiener drift `1 + sigma_w^2 min(t, t')`;
- an **exploration** (`tvbod.core.exploration`): the fixed `beta_t` schedule, adaptive
  kappa/lambda, or A-GP-UCB; with the UCB or EI **acquisition** (`tvbod.core.acquisition`).

Like SafeOpt's `optimize()`, `ask()` is three named steps: settle the posterior on D, build the
step's acquisition, maximize it on the domain (`tvbod.core.optimize`). `tell()` asks the trigger
about the posterior *before* adding the point, then resets or appends; `settle()` runs the rest.
With `safety:` (`tvbod.core.safety`) the maximum is taken over the certified safe set, a reset
arms a backup controller, and a measurement past the threshold is recorded capped.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..acquisition import EI, UCB, PenalizedUCB, complexity_factor, mean_hessian_fd
from ..calibration import OutputMap
from ..errors import DomainError
from ..exploration import Told
from ..gp import ExactGP
from ..hyperparameters import Hyperparameters
from ..kernels import ForgettingFactor
from ..optimize import Budget, maximize_on_box, maximize_on_set, sobol_unit
from ..safety import SafeSet, sigma_f
from ..spec import OptimizerSpec
from ..trigger import decide
from .base import Measured, Strategy, TellResult
from .build import (build_base_kernel, build_domain, build_exploration, build_kernel,  # noqa: F401
                    build_temporal, build_trigger)
from .gpucb_fit import calibrate_output, learn_forgetting, refit_hyperparameters, set_kernel_hypers
from .gpucb_state import read_state, write_state
from .views import GPViews

#: Stream ids for the per-step generators `default_rng([seed, t, stream])`.
_RNG_ASK = 1  # gpucb_fit.RNG_HYPER = 2: the refit's
#: How many of the best observed points join the Sobol candidates on a box.
_EXTRA_STARTS = 3


@lru_cache(maxsize=64)
def _shared_sobol(dim: int, n: int, seed: int) -> np.ndarray:
    """`sobol_unit(dim, n, seed)`, one read-only array shared by every strategy with the same
    `(dim, n, seed)` (a daemon's plants of one kind: 32 KB each at d = 4, n = 1024)."""
    unit = sobol_unit(dim, n, seed)
    unit.flags.writeable = False
    return unit


class GPUCBStrategy(GPViews, Strategy):
    """GP-UCB with a configurable reset policy, temporal factor and exploration (module docstring)."""

    def __init__(self, spec: OptimizerSpec) -> None:
        self.spec = spec
        self.name = spec.strategy
        self.domain = build_domain(spec)
        self.base_kernel = build_base_kernel(spec)
        self.gp = ExactGP(build_kernel(spec, self.domain, self.base_kernel), spec.noise_variance,
                          build_temporal(spec))
        self.trigger = build_trigger(spec)
        h = spec.hyper
        self._learns_variances = h is not None and (h.variance_bounds or h.noise_bounds) is not None
        self.budget = Budget(spec.candidates, spec.starts, spec.maxiter, spec.polish,
                             spec.tolerance)
        self._sign = 1.0 if spec.sense == "maximize" else -1.0
        self.output = OutputMap(spec.measurement_offset, spec.measurement_scale, self._sign,
                                spec.n_calibration, spec.pessimism)
        if self.domain.finite:
            self.gp.attach_query_set(np.arange(self.domain.size, dtype=float)[:, None])
            self._unit = None
        else:
            self._unit = _shared_sobol(self.domain.dim, spec.candidates, spec.seed)
        self.exploration = build_exploration(spec)
        self.safety = None if spec.safety is None else SafeSet(spec.safety, self.domain)
        self._t = 1
        self._t_reset = 0
        self._resets = 0
        self._last_reset_t: int | None = None
        self._pending: np.ndarray | None = None
        #: what `settle` still has to do after the last tell (None: nothing)
        self._followup: Told | None = None

    @property
    def settled(self) -> bool:
        return self._followup is None

    # ------------------------------------------------------------------ ask / tell
    def ask(self) -> np.ndarray:
        self.settle()
        if self._pending is None:
            self._pending = self._propose(self._t)
            self.gp.release_screen()  # one proposal per step: keep only L between steps
        return self.domain.to_physical(self._pending)

    def compact(self) -> None:
        """The GP's factor packed to its lower triangle until the next read (`ExactGP.pack_factor`)."""
        self.gp.pack_factor()

    def _propose(self, t: int) -> np.ndarray:
        rng = np.random.default_rng([self.spec.seed, t, _RNG_ASK])
        if self.safety is not None:
            return self._propose_safe(t, rng)
        if self.gp.n == 0:
            # The acquisition is constant on an empty dataset: propose a uniformly random point.
            return self.domain.sample(rng, 1)[0]
        return self._maximize(self._acquisition(t), t, rng)

    def _acquisition(self, t: int):
        """Step `t`'s acquisition: EI, or the UCB with the exploration's weight (and penalty)."""
        if self.spec.acquisition == "ei":
            return EI(float(np.max(self._data_mean(t))), self.spec.ei_xi)
        kappa, lam = self.exploration.kappa(t), self.exploration.penalty()
        if lam > 0:
            return PenalizedUCB(kappa, lam, lambda P: complexity_factor(
                mean_hessian_fd(lambda Q: self._kernel_mean(Q, t), self._kernel_coords(P))))
        return UCB(kappa)

    def _maximize(self, acq, t: int, rng: np.random.Generator) -> np.ndarray:
        if self.domain.finite:
            mean, var = self.gp.predict_query_set(float(t))
            i, _ = maximize_on_set(mean, var, acq, self.budget.starts)
            return np.array([float(i)])
        best = np.argsort(-self.gp.y_)[:_EXTRA_STARTS]
        z, _ = maximize_on_box(
            self.gp, float(t), acq, self.domain.z_lower, self.domain.z_upper,
            self._unit, rng.random(self.domain.dim), self.budget, extra=self.gp.X_[best],
        )
        return z

    def _propose_safe(self, t: int, rng: np.random.Generator) -> np.ndarray:
        """The acquisition's maximum over the admitted safe set within the step box
        (`tvbod.core.safety`); the backup right after a reset, a seed on an empty D."""
        acq = None if self.safety.forced() is not None or self.gp.n == 0 else self._acquisition(t)
        return self.safety.propose(self.gp, t, acq, self.output, self._sigma_f, self.domain,
                                   self._unit, rng.random(self.domain.dim), self.budget)

    @property
    def _sigma_f(self) -> float:
        return sigma_f(self.spec.kernel.variance if self.base_kernel is None
                       else self.base_kernel.variance)

    def measured(self, y: float, failed: bool = False) -> Measured:
        """What `tell(x, y, failed)` records (`Measured`), without changing anything: the one
        place a measurement meets the safety cap (`SafeSet.cap`) and the GP's scale."""
        if self.safety is None:
            return Measured(float(y), self.to_internal_y(y), False, False)
        self.settle()
        yi, violation = self.safety.cap(0.0 if failed else self.to_internal_y(y), failed,
                                        self.output, self._sigma_f)
        told = float(self.output.to_measurement(yi))
        return Measured(told, self.to_internal_y(told), bool(violation), bool(failed or told != y))

    def safe_fraction(self) -> float | None:
        """The share of the domain certified safe for the next step (None without `safety:`)."""
        if self.safety is None:
            return None
        self.settle()
        return self.safety.safe_fraction(self.gp, self._t, self.output, self._sigma_f,
                                         self.domain, self._unit)

    def tell(self, x, y: float, failed: bool = False) -> TellResult:
        """Report `y` at `x`; `failed`: the experiment failed (under `safety:` told at the cap,
        else `y` is the failure policy's value)."""
        z = self.domain.to_internal(x)
        m = self.measured(y, failed)
        if not np.isfinite(m.told):
            raise DomainError(f"measurement must be finite, got {y!r}")
        self.output.check(m.told)  # before any change: a refused measurement leaves the state as it was
        self.settle()
        t, n_before = self._t, self.gp.n
        t_prime = t - self._t_reset
        mu, sigma = self._posterior_at(z, t)
        prior = float(self.gp.prior_variance(z[None, :], np.array([float(t)]))[0])
        decision = decide(self.trigger, m.internal, mu, sigma, t_prime, n_before,
                          self.gp.noise_variance, self.output.calibrating, prior)
        resets = ((self.spec.reset_policy == "event" and decision.fired)
                  or (self.spec.reset_policy == "periodic" and t % self.spec.reset_period == 0))
        backup = None
        if self.safety is not None:  # the backup is chosen from D before a reset drops it
            backup = self.safety.before_tell(self.gp, t, failed, m.violation, resets, self.output,
                                             self._sigma_f)
        reason, burst, yi = self._update_dataset(t, z, m.told, m.internal, decision.fired,
                                                 calibrate=not m.capped)
        if self.safety is not None:
            backup = self.safety.after_tell(z, reason is not None, backup)
        self._followup = Told(t, yi, mu, reason is not None, n_before)
        self._t += 1
        self._pending = None
        return TellResult(
            t=t, t_prime=t_prime, reset=reason is not None, reset_reason=reason,
            psi=decision.psi, threshold=decision.threshold, mu=mu, sigma=sigma,
            dataset_size=self.gp.n, test=decision.test, window=decision.window,
            window_psi=decision.window_psi, window_threshold=decision.window_threshold,
            held=decision.held, uninformed=decision.uninformed, reset_burst=burst,
            safety_violation=m.violation, failed=failed,
            backup=None if backup is None else self.domain.to_physical(backup).tolist(),
            safe_fraction=None if self.safety is None else self.safety.safe_fraction(
                self.gp, self._t, self.output, self._sigma_f, self.domain, self._unit),
            scaled=float(self.gp.y_[-1]) if self.gp.n else self.to_internal_y(m.told),
        )

    def _update_dataset(self, t: int, z, y: float, yi: float, fired: bool, calibrate: bool = True):
        """Reset and/or append `(z, y)`; returns `(reset reason or None, reset burst, yi)` (`yi`
        is re-expressed if the reset re-centred the measurement map). `calibrate`: False for a
        value the safety cap set (it says nothing of the measurement scale)."""
        reason, burst = None, False
        if self.spec.reset_policy == "event" and fired:  # Paper, Alg. 1: D <- {(x_t, y_t)}
            reason = "event"
            self.gp.reset()
            burst = self.trigger.on_reset(t)
            if self.output.recentre(y):
                yi = self.to_internal_y(y)
        self.gp.append(z, yi, float(t))
        if self.spec.reset_policy == "periodic" and t % self.spec.reset_period == 0:
            reason = "periodic"  # R-GP-UCB: forget everything every N steps
            self.gp.reset()
        if reason is not None:
            self._t_reset = t
            self._resets += 1
            self._last_reset_t = t
        elif self._relevels(t):
            old = (self.output.offset_, self.output.scale_)
            if self.output.recentre(self.output.to_measurement(self.gp.y_)):
                self._reexpress(old)
                yi = float(self.gp.y_[-1])
        if calibrate:
            calibrate_output(self, y)
        return reason, burst, yi

    def _relevels(self, t: int) -> bool:
        """`measurement.relevel`: within the refractory period that follows an event reset."""
        return (self.spec.relevel and self._resets > 0 and self.spec.reset_policy == "event"
                and 0 < t - self._t_reset <= self.trigger.hold)

    def _reexpress(self, old: tuple[float, float]) -> None:
        """D's targets, written under the measurement map `old` (offset, scale), in the current
        one; the window test's residuals were in the old units and are forgotten."""
        self.gp.y_ = self.output.reexpress(self.gp.y_, *old)
        self.gp.refactor()
        self.trigger.forget_residuals()

    def settle(self) -> bool:
        """Finish the last `tell`: the MAP refit and the exploration update (True if there was work).

        `tell` returns once the trigger has decided and D is updated, the part a reply needs; this
        follow-up only shapes the next posterior, so the daemon runs it off the reply path, together
        with the next proposal. Every read of the posterior (`ask`, `predict`, `state_dict`, ...)
        settles first, so results never depend on when it ran."""
        if self._followup is None:
            return False
        told, self._followup = self._followup, None
        # Hyperparameters are kept across a reset until D has `min_points` points again (robust
        # trigger): one point carries no lengthscale information.
        if (self.spec.hyper is not None and told.t % self.spec.hyper.refit_every == 0
                and self.gp.n >= self.spec.min_points):
            self._refit_hyperparameters(told.t)
        if told.reset:
            self.exploration.on_reset()
        new = self.exploration.after_tell(told, self)
        if new is not None and not np.array_equal(new, self.base_kernel.lengthscales):
            set_kernel_hypers(self, new)
            self.gp.refactor()
        if self.spec.learns_forgetting:
            self._learn_forgetting()
        return True

    # ------------------------------------------------------------------ hyperparameters
    def _refit_hyperparameters(self, t: int) -> Hyperparameters:
        """MAP hyperparameters on D (`gpucb_fit.refit_hyperparameters`)."""
        return refit_hyperparameters(self, t)

    def _learn_forgetting(self) -> None:
        """`forgetting_floor: auto` (`gpucb_fit.learn_forgetting`)."""
        learn_forgetting(self)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        self.settle()
        return write_state(self)

    def load_state_dict(self, state: dict) -> None:
        r = read_state(self, state)
        if r.lengthscales is not None:
            set_kernel_hypers(self, r.lengthscales,
                              r.variances[0] if self._learns_variances else None)
        if self._learns_variances:
            self.gp.noise_variance = r.variances[1]
        if r.noise_variance is not None:
            self.gp.noise_variance = r.noise_variance
        if self.spec.learns_forgetting:
            self.gp.temporal = ForgettingFactor(r.forgetting or 0.0)
        self.gp.load_state_dict(r.gp)
        self.exploration, self.trigger, self.output = r.exploration, r.trigger, r.output
        self.safety = r.safety
        self._t, self._t_reset, self._resets = r.t, r.t_reset, r.resets
        self._last_reset_t, self._pending = r.last_reset_t, r.pending
        self._followup = None
        if self.spec.learns_forgetting and r.forgetting is None:  # state written under another
            self._learn_forgetting()  # floor: learn it from the restored D (configuration change)
