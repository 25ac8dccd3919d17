"""The GP-UCB family: one engine, two orthogonal choices.

- a **reset policy**: none (GP-UCB), periodic every N steps (R-GP-UCB, Bogunovic et al. 2016), or
  the event trigger (ET-GP-UCB, Brunzema et al. 2022);
- a **temporal factor** on the kernel: none, TV-GP-UCB's forgetting `(1-eps)^(|t-t'|/2)`, or
  UI-TVBO's Wiener drift `1 + sigma_w^2 min(t, t')`.

`ask()` reads as the pipeline: posterior on D -> `beta_t` -> maximize UCB. `tell()` checks the
trigger against the posterior *before* adding the point, then resets or appends.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize

from ..acquisition import (beta_t, complexity_factor, expected_improvement,
                           expected_improvement_grad, kappa_ucb, mean_hessian_fd, ucb_grad)
from ..calibration import OutputMap
from ..domains import ArmsDomain, BoxDomain, PointsDomain
from ..errors import DomainError, StateError
from ..exploration import (AdaptiveKappaLambda, AGPUCBScaling, bound_regret_estimate, norm_growth,
                           one_step_regret_estimate)
from ..gp import ExactGP
from ..hyperparameters import GammaPrior, Hyperparameters, fit_hyperparameters
from ..kernels import ForgettingFactor, Matern52, MatrixKernel, SquaredExponential, WienerDrift
from ..optimize import Budget, maximize_ucb_on_box, maximize_ucb_on_set, sobol_unit
from ..spec import OptimizerSpec
from ..trigger import EventTrigger, RobustTrigger
from .base import Strategy, TellResult

_STATE_FORMAT = 1
#: Stream ids for the per-step generators `default_rng([seed, t, stream])`.
_RNG_ASK = 1
_RNG_HYPER = 2
_RNG_MC = 3  # the Monte Carlo points of the integrated variance (adaptive kappa/lambda)
#: Candidates of the A-GP-UCB sigma-floor check on a box (the first rows of the Sobol set).
_FLOOR_CANDIDATES = 256
#: How many of the best observed points join the Sobol candidates on a box.
_EXTRA_STARTS = 3


def build_domain(spec: OptimizerSpec):
    d = spec.domain
    if d.type == "box":
        return BoxDomain(d.lower, d.upper, d.scaling)
    if d.type == "points":
        return PointsDomain(d.points, d.scaling)
    return ArmsDomain(d.n_arms)


def build_base_kernel(spec: OptimizerSpec, lengthscales=None):
    """The spatial kernel on internal coordinates (None for a matrix kernel)."""
    k = spec.kernel
    if k.type == "matrix":
        return None
    ls = k.lengthscales if lengthscales is None else lengthscales
    return (SquaredExponential if k.type == "se" else Matern52)(ls, k.variance)


def build_kernel(spec: OptimizerSpec, domain, base=None):
    """What the GP uses: the base kernel on a box, its Gram matrix on points, the fixed matrix on arms."""
    if spec.kernel.type == "matrix":
        return MatrixKernel(spec.kernel.matrix)
    base = base if base is not None else build_base_kernel(spec)
    if isinstance(domain, PointsDomain):
        Z = domain.kernel_inputs
        return MatrixKernel(base(Z, Z))
    return base


def build_exploration(spec: OptimizerSpec):
    """The exploration state of `spec.exploration` (None: the fixed `beta_t` schedule)."""
    e = spec.exploration
    if e is None:
        return None
    if e.type == "adaptive":
        return AdaptiveKappaLambda(e.kappa0, e.lambda0, e.kappa_min, e.kappa_max, e.lambda_max,
                                   e.kappa_rate, e.lambda_rate, e.ema)
    return AGPUCBScaling(spec.kernel.lengthscales, e.norm_bound, e.exponent, e.rule, e.estimator,
                         e.h_max, e.sigma_floor)


def build_trigger(spec: OptimizerSpec):
    """The robust trigger of `spec.trigger`, or the paper's point test (also for non-ET presets,
    whose `tell` reports psi/threshold without acting on them)."""
    t = spec.trigger
    if t is not None and t.robust:
        return RobustTrigger(spec.delta_b, spec.noise_variance, t.window, t.refractory,
                             t.burst_resets, t.burst_steps)
    return EventTrigger(spec.delta_b, spec.noise_variance)


def build_temporal(spec: OptimizerSpec):
    if spec.temporal == "forgetting":
        return ForgettingFactor(spec.forgetting_eps)
    if spec.temporal == "drift":
        return WienerDrift(spec.drift_variance)
    return None


class GPUCBStrategy(Strategy):
    """GP-UCB with a configurable reset policy and temporal kernel factor (see module docstring)."""

    def __init__(self, spec: OptimizerSpec) -> None:
        self.spec = spec
        self.name = spec.strategy
        self.domain = build_domain(spec)
        self.base_kernel = build_base_kernel(spec)
        self.gp = ExactGP(build_kernel(spec, self.domain, self.base_kernel), spec.noise_variance,
                          build_temporal(spec))
        self.trigger = build_trigger(spec)
        self._robust = isinstance(self.trigger, RobustTrigger)
        h = spec.hyper
        self._learns_variances = h is not None and (h.variance_bounds or h.noise_bounds) is not None
        self.budget = Budget(spec.candidates, spec.starts, spec.maxiter)
        self._sign = 1.0 if spec.sense == "maximize" else -1.0
        self.output = OutputMap(spec.measurement_offset, spec.measurement_scale, self._sign,
                                spec.n_calibration)
        if self.domain.finite:
            self.gp.attach_query_set(np.arange(self.domain.size, dtype=float)[:, None])
            self._unit = None
        else:
            self._unit = sobol_unit(self.domain.dim, spec.candidates, spec.seed)
        self.exploration = build_exploration(spec)
        self._t = 1
        self._t_reset = 0
        self._resets = 0
        self._last_reset_t: int | None = None
        self._pending: np.ndarray | None = None

    # ------------------------------------------------------------------ read-only views
    @property
    def t(self) -> int:
        return self._t

    @property
    def t_prime(self) -> int:
        """`t'` for the next tell: steps since the last reset (`t` before the first one)."""
        return self._t - self._t_reset

    @property
    def dataset_size(self) -> int:
        return self.gp.n

    @property
    def resets(self) -> int:
        return self._resets

    @property
    def last_reset_t(self) -> int | None:
        return self._last_reset_t

    @property
    def pending(self) -> np.ndarray | None:
        """The proposal waiting for its `tell`, in physical units, or None."""
        return None if self._pending is None else self.domain.to_physical(self._pending)

    def to_internal_y(self, y: float) -> float:
        """Measurement -> the GP's scale: `sign * (y - offset) / scale` (sign -1 when minimizing;
        offset/scale calibrated with `measurement: auto`, `calibration.py`)."""
        return self.output.to_internal(y)

    def predict(self, x) -> tuple[float, float]:
        """Posterior mean and std of the objective at `x` for the next step, in measurement units."""
        z = self.domain.to_internal(x)
        mean, var = self.gp.predict(z[None, :], float(self._t))
        return (float(self.output.to_measurement(float(mean[0]))),
                float(np.sqrt(var[0])) * self.output.scale_)

    def dataset(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The current dataset D as `(X physical (n, d), y in measurement units (n,), steps (n,))`."""
        if self.gp.n == 0:
            return np.empty((0, self.domain.dim)), np.empty(0), np.empty(0, dtype=int)
        X = np.array([self.domain.to_physical(z) for z in self.gp.X_])
        y = self.output.to_measurement(self.gp.y_)
        return X, y, self.gp.times_.astype(int)

    # ------------------------------------------------------------------ ask / tell
    def ask(self) -> np.ndarray:
        if self._pending is None:
            self._pending = self._propose()
        return self.domain.to_physical(self._pending)

    def _propose(self) -> np.ndarray:
        t = self._t
        rng = np.random.default_rng([self.spec.seed, t, _RNG_ASK])
        if self.gp.n == 0:
            # The UCB is constant on an empty dataset: propose a uniformly random point.
            return self.domain.sample(rng, 1)[0]
        if self.exploration is not None or self.spec.acquisition != "ucb":
            return self._propose_extended(t, rng)
        beta = beta_t(t, self.spec.beta_c1, self.spec.beta_c2)
        if self.domain.finite:
            mean, var = self.gp.predict_query_set(float(t))
            i, _ = maximize_ucb_on_set(mean, var, beta)
            return np.array([float(i)])
        best = np.argsort(-self.gp.y_)[:_EXTRA_STARTS]
        z, _ = maximize_ucb_on_box(
            self.gp, float(t), beta, self.domain.z_lower, self.domain.z_upper,
            self._unit, rng.random(self.domain.dim), self.budget, extra=self.gp.X_[best],
        )
        return z

    def _posterior_at(self, z: np.ndarray, t: int) -> tuple[float, float]:
        if self.domain.finite and self.gp.n:
            mean, var = self.gp.predict_query_set(float(t))
            i = int(z[0])
            return float(mean[i]), float(np.sqrt(var[i]))
        mean, var = self.gp.predict(z[None, :], float(t))
        return float(mean[0]), float(np.sqrt(var[0]))

    def tell(self, x, y: float) -> TellResult:
        z = self.domain.to_internal(x)
        if not np.isfinite(y):
            raise DomainError(f"measurement must be finite, got {y!r}")
        t, yi = self._t, self.to_internal_y(y)
        t_prime = t - self._t_reset
        mu, sigma = self._posterior_at(z, t)
        n_before = self.gp.n
        if self._robust:
            decision = self.trigger.evaluate(yi, mu, sigma, t_prime, n_before,
                                             self.gp.noise_variance)
        else:
            decision = self.trigger.evaluate(yi, mu, sigma, t_prime)
        if self.output.calibrating and decision.fired:
            # the trigger judges residuals on the GP's scale, unknown until calibrated
            decision = replace(decision, fired=False, held=True)
        reason, burst = None, False
        # Paper, Alg. 1: on a trigger D <- {(x_t, y_t)}; the trigger is moot on an empty D.
        if self.spec.reset_policy == "event" and decision.fired and n_before > 0:
            reason = "event"
            self.gp.reset()
            burst = self._robust and self.trigger.on_reset(t)
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
        self._calibrate(y)
        # Hyperparameters are kept across a reset until D has `min_points` points again (robust
        # trigger): one point carries no lengthscale information.
        if (self.spec.hyper is not None and t % self.spec.hyper.refit_every == 0
                and self.gp.n >= self.spec.min_points):
            self._refit_hyperparameters(t)
        if self.exploration is not None:
            self._update_exploration(t, yi, mu, reason is not None, n_before)
        self._t += 1
        self._pending = None
        return TellResult(
            t=t, t_prime=t_prime, reset=reason is not None, reset_reason=reason,
            psi=decision.psi, threshold=decision.threshold, mu=mu, sigma=sigma,
            dataset_size=self.gp.n, test=decision.test, window=decision.window,
            window_psi=decision.window_psi, window_threshold=decision.window_threshold,
            held=decision.held, reset_burst=burst,
        )

    def _calibrate(self, y: float) -> None:
        """`measurement: auto`: update the offset/scale with `y` and re-express D's targets (and
        forget the window test's residuals, which were in the old units)."""
        old = (self.output.offset_, self.output.scale_)
        if self.output.observe(y):
            self.gp.y_ = self.output.reexpress(self.gp.y_, *old)
            self.gp.refactor()
            if self._robust:
                self.trigger.residuals_ = []

    # ------------------------------------------------------------------ hyperparameters
    @property
    def lengthscales(self) -> np.ndarray | None:
        return None if self.base_kernel is None else self.base_kernel.lengthscales.copy()

    @property
    def variances(self) -> tuple[float, float]:
        """`(sigma_f^2, sigma_n^2)` in force (fitted with `hyperparameters.variance` /
        `noise_variance: map`, else the configured values)."""
        return (self.spec.kernel.variance if self.base_kernel is None else self.base_kernel.variance,
                self.gp.noise_variance)

    def _set_lengthscales(self, lengthscales, variance: float | None = None) -> None:
        base = build_base_kernel(self.spec, np.asarray(lengthscales, dtype=float))
        if variance is not None:
            base = type(base)(base.lengthscales, variance)
        self.base_kernel = base
        self.gp.kernel = build_kernel(self.spec, self.domain, self.base_kernel)

    def _refit_hyperparameters(self, t: int) -> Hyperparameters:
        """MAP lengthscales (and, if configured, sigma_f^2 and sigma_n^2) on the current dataset,
        then a full refactorization if anything changed; returns the fit (`skipped`: the current
        values met `refit_tolerance`)."""
        h = self.spec.hyper
        X = self.gp.X_ if self.gp.n else np.empty((0, self.domain.dim))
        if isinstance(self.domain, PointsDomain) and self.gp.n:
            X = self.domain.kernel_inputs[self.gp.X_[:, 0].astype(int)]
        temporal_K = None
        if self.gp.temporal is not None and self.gp.n:
            temporal_K = self.gp.temporal(self.gp.times_, self.gp.times_)
        start = self.base_kernel
        if isinstance(self.exploration, AGPUCBScaling):  # warm start from the MAP, not theta_t
            start = self.base_kernel.with_lengthscales(self.exploration.theta_map_)
        fit = fit_hyperparameters(
            start, X, self.gp.y_, self.gp.noise_variance,
            GammaPrior(h.prior_shape, h.prior_rate), (h.lower, h.upper),
            np.random.default_rng([self.spec.seed, t, _RNG_HYPER]), h.restarts, h.maxiter, temporal_K,
            h.variance_bounds, h.noise_bounds, tolerance=h.refit_tolerance, objective=h.objective,
        )
        if isinstance(self.exploration, AGPUCBScaling):
            self.exploration.theta_map_ = fit.lengthscales  # theta_t is set by _update_exploration
            return fit
        if (not np.array_equal(fit.lengthscales, self.base_kernel.lengthscales)
                or fit.variance != self.base_kernel.variance
                or fit.noise_variance != self.gp.noise_variance):
            self._set_lengthscales(fit.lengthscales, fit.variance)
            self.gp.noise_variance = fit.noise_variance
            self.gp.refactor()
        return fit

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "format": _STATE_FORMAT,
            "strategy": self.name,
            "dim": int(self.domain.dim),
            "t": self._t,
            "t_reset": self._t_reset,
            "resets": self._resets,
            "last_reset_t": self._last_reset_t,
            "pending": None if self._pending is None else self._pending.tolist(),
            "lengthscales": None if self.base_kernel is None else self.base_kernel.lengthscales.tolist(),
            "gp": self.gp.state_dict(),
            **({} if self.exploration is None else {"exploration": self.exploration.state_dict()}),
            **({"trigger": self.trigger.state_dict()} if self._robust else {}),
            **({"variances": list(self.variances)} if self._learns_variances else {}),
            **({"output": self.output.state_dict()} if self.spec.calibrates else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        try:
            if state["format"] != _STATE_FORMAT:
                raise StateError(f"state format {state['format']!r}, expected {_STATE_FORMAT}")
            if state["strategy"] != self.name:
                raise StateError(f"state is for strategy {state['strategy']!r}, not {self.name!r}")
            if int(state["dim"]) != self.domain.dim:
                raise StateError(f"state has dimension {state['dim']}, domain has {self.domain.dim}")
            t, t_reset = int(state["t"]), int(state["t_reset"])
            if not 0 <= t_reset < t:
                raise StateError(f"inconsistent steps t={t}, t_reset={t_reset}")
            pending = state["pending"]
            pending = None if pending is None else np.asarray(pending, dtype=float).reshape(-1)
            gp_state = state["gp"]
            gp_state_n = len(gp_state["y"])
            if len(gp_state["X"]) != gp_state_n or len(gp_state["times"]) != gp_state_n:
                raise StateError("gp state has inconsistent lengths")
            resets = int(state["resets"])
            last = state["last_reset_t"]
            ls = state.get("lengthscales")
            if (ls is None) != (self.base_kernel is None) or (
                    ls is not None and len(ls) != len(self.base_kernel.lengthscales)):
                raise StateError("state's lengthscales do not fit the kernel")
            explo = state.get("exploration")
            if (explo is None) != (self.exploration is None):
                raise StateError("state's exploration does not match the spec")
            explo_new = None
            if explo is not None:
                explo_new = build_exploration(self.spec)
                explo_new.load_state_dict(explo)
            # A state without trigger state (written under the paper trigger, or by tvbod 0.1.0)
            # starts the robust trigger afresh (an empty residual window); one without fitted
            # variances starts from the configured ones.
            trigger_new = build_trigger(self.spec)
            if self._robust and state.get("trigger") is not None:
                trigger_new.load_state_dict(state["trigger"])
            variances = (self.spec.kernel.variance, self.spec.noise_variance)
            if self._learns_variances and state.get("variances") is not None:
                variances = tuple(float(v) for v in state["variances"])
                if len(variances) != 2 or not all(np.isfinite(v) and v > 0 for v in variances):
                    raise StateError(f"variances {variances!r} are not two positive numbers")
            output = OutputMap(self.spec.measurement_offset, self.spec.measurement_scale,
                               self._sign, self.spec.n_calibration)
            if ("output" in state) != self.spec.calibrates:
                raise StateError("the state's measurement map (fixed or auto) differs from the "
                                 "spec's; the GP's targets cannot be re-expressed")
            if self.spec.calibrates:
                output.load_state_dict(state["output"])
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, StateError):
                raise
            raise StateError(f"malformed state: {exc!r}") from None
        if ls is not None:
            self._set_lengthscales(ls, variances[0] if self._learns_variances else None)
        if self._learns_variances:
            self.gp.noise_variance = variances[1]
        self.gp.load_state_dict(gp_state)
        if self.exploration is not None:
            self.exploration = explo_new
        self.trigger = trigger_new
        self.output = output
        self._t, self._t_reset, self._resets = t, t_reset, resets
        self._last_reset_t = None if last is None else int(last)
        self._pending = pending

    # ------------------------------------------------------------------ issue 6: EI, adaptive, A-GP-UCB
    @property
    def kappa(self) -> float | None:
        """The UCB weight of the next ask (`kappa_t`, or `sqrt(beta_t)`); None for EI."""
        if self.spec.acquisition == "ei":
            return None
        e = self.exploration
        if isinstance(e, AdaptiveKappaLambda):
            return e.kappa_
        base = float(np.sqrt(beta_t(self._t, self.spec.beta_c1, self.spec.beta_c2)))
        return base + e.norm_term() if isinstance(e, AGPUCBScaling) else base

    def _scores(self, t: int):
        """`(score(mean, var), score_grad(mean, var, dmean, dvar))` of the smooth acquisition part."""
        if self.spec.acquisition == "ei":
            best = float(np.max(self._data_mean(t)))
            xi = self.spec.ei_xi
            return (lambda m, v: expected_improvement(m, v, best, xi),
                    lambda m, v, dm, dv: expected_improvement_grad(m, v, dm, dv, best, xi))
        kappa = self.kappa
        beta = kappa * kappa
        return (lambda m, v: kappa_ucb(m, v, kappa),
                lambda m, v, dm, dv: ucb_grad(m, v, dm, dv, beta))

    def _data_mean(self, t: int) -> np.ndarray:
        if self.domain.finite:
            return self.gp.predict_query_set(float(t))[0][self.gp.X_[:, 0].astype(int)]
        return self.gp.predict(self.gp.X_, float(t))[0]

    def _propose_extended(self, t: int, rng: np.random.Generator) -> np.ndarray:
        """EI or the kappa-UCB maximized like `maximize_ucb_on_box`; with adaptive kappa/lambda the
        penalty `lambda sigma^2 C(x)` is scored only on the screened/polished points (it needs the
        mean's Hessian, and its eigenvalue terms are not smooth for L-BFGS-B)."""
        score, score_grad = self._scores(t)
        if self.domain.finite:
            mean, var = self.gp.predict_query_set(float(t))
            values = score(mean, var)
            k = min(self.budget.starts, len(values))
            points = np.argpartition(-values, k - 1)[:k].astype(float)[:, None]
            values, var = values[points[:, 0].astype(int)], var[points[:, 0].astype(int)]
        else:
            points, values, var = self._box_candidates(t, rng, score, score_grad)
        if isinstance(self.exploration, AdaptiveKappaLambda) and self.exploration.lambda_ > 0:
            C = complexity_factor(mean_hessian_fd(lambda P: self._kernel_mean(P, t),
                                                  self._kernel_coords(points)))
            values = values - self.exploration.lambda_ * var * C
        return points[int(np.argmax(values))].copy()

    def _box_candidates(self, t, rng, score, score_grad):
        """Screened Sobol candidates (+ best data points), polished together by L-BFGS-B; returns
        `(points (2k, d), values (2k,), variances (2k,))` in float64."""
        lo, hi = self.domain.z_lower, self.domain.z_upper
        cands = lo + np.mod(self._unit + rng.random(self.domain.dim), 1.0) * (hi - lo)
        best = np.argsort(-self.gp.y_)[:_EXTRA_STARTS]
        cands = np.vstack([cands, np.clip(self.gp.X_[best], lo, hi)])
        k = min(self.budget.starts, len(cands))
        starts = cands[self.gp.screen_best(cands, float(t), score, k)]
        points = starts
        if self.budget.maxiter > 0:
            kk, d = starts.shape

            def objective(flat):
                value, grad = score_grad(*self.gp.predict_with_grad(flat.reshape(kk, d), float(t)))
                return -float(value.sum()), -grad.ravel()

            res = minimize(objective, starts.ravel(), jac=True, method="L-BFGS-B",
                           bounds=list(zip(np.tile(lo, kk), np.tile(hi, kk))),
                           options={"maxiter": self.budget.maxiter})
            points = np.vstack([starts, np.clip(res.x.reshape(kk, d), lo, hi)])
        mean, var = self.gp.predict(points, float(t))
        return points, score(mean, var), var

    # -- the GP in kernel coordinates (a box's internal z; a points domain's scaled coordinates)
    def _kernel_coords(self, Z: np.ndarray) -> np.ndarray:
        if isinstance(self.domain, PointsDomain):
            return self.domain.kernel_inputs[np.asarray(Z)[:, 0].astype(int)]
        return np.asarray(Z, dtype=float)

    def _kernel_mean(self, P: np.ndarray, t: int) -> np.ndarray:
        """Posterior mean at kernel coordinates `P` `(m, d)` (continuous also on a points domain)."""
        if not isinstance(self.domain, PointsDomain):
            return self.gp.predict(P, float(t))[0]
        k = self.base_kernel(P, self._kernel_coords(self.gp.X_))
        if self.gp.temporal is not None:
            k = k * self.gp.temporal(np.array([float(t)]), self.gp.times_)
        return k @ self.gp.alpha_

    def integrated_variance(self, t: int) -> float:
        """`I_t`: mean posterior variance over the domain at step `t` (Monte Carlo: `mc_points`
        uniform points from `default_rng([seed, t, 3])` on a box; the exact mean on a points set)."""
        if self.domain.finite:
            return float(np.mean(self.gp.predict_query_set(float(t))[1]))
        rng = np.random.default_rng([self.spec.seed, t, _RNG_MC])
        return float(np.mean(self.gp.predict(self.domain.sample(rng, self.spec.exploration.mc_points),
                                             float(t))[1]))

    def _update_exploration(self, t: int, yi: float, mu: float, reset: bool, n_before: int) -> None:
        """After the tell's reset/append: adaptive `kappa`, `lambda` or A-GP-UCB's `h`, `theta_t`.
        A reset first calls `on_reset()` (docs/configuration.md, *Exploration and resets*)."""
        e = self.exploration
        if reset:
            e.on_reset()
        if isinstance(e, AdaptiveKappaLambda):
            if not reset and n_before > 0:  # Delta_t = |y_t - mu_{t-1}(x_t)| needs a posterior
                e.update_kappa(abs(yi - mu))
            if self.gp.n:
                e.update_lambda(self.integrated_variance(t + 1))
            return
        if self.gp.n:
            e.advance(self._agp_estimate(t))
        new = e.lengthscales()
        if not np.array_equal(new, self.base_kernel.lengthscales):
            self._set_lengthscales(new)
            self.gp.refactor()

    def _agp_estimate(self, t: int):
        """`h -> estimate` for A-GP-UCB's line search on the current dataset (kernel coordinates)."""
        e, spec = self.exploration, self.spec
        X = self._kernel_coords(self.gp.X_)
        tk = None if self.gp.temporal is None else self.gp.temporal(self.gp.times_, self.gp.times_)
        n, d = X.shape
        if e.estimator == "bound":
            return lambda h: bound_regret_estimate(h, e.tau_, d, e.norm_bound, e.bound_constant)
        if e.estimator == "one-step":
            base = np.sqrt([beta_t(int(s), spec.beta_c1, spec.beta_c2) for s in self.gp.times_])
            growth = np.array([norm_growth(j) for j in range(1, n + 1)]) * e.norm_bound

            def one_step(h: float) -> float:
                K = self.base_kernel.with_lengthscales(e.lengthscales(h))(X, X)
                if tk is not None:
                    K = K * tk
                prior = np.diag(K).copy()
                K[np.diag_indices(n)] += spec.noise_variance
                try:
                    L = cholesky(K, lower=True, check_finite=False)
                except LinAlgError:
                    return np.inf
                # one-step-ahead variance of f at x_j given x_1..x_{j-1}: L_jj^2 - sigma_n^2
                sig = np.sqrt(np.clip(np.diag(L) ** 2 - spec.noise_variance, 0.0, prior))
                return one_step_regret_estimate(base + growth * h ** (d / 2.0), sig)

            return one_step
        # Wang & de Freitas: smallest scaling with sigma_t(x_{t+1}) >= sigma_floor, x_{t+1} the
        # UCB maximizer over a candidate set under the scaled lengthscales.
        P = (self.domain.kernel_inputs if isinstance(self.domain, PointsDomain) else
             self.domain.z_lower + self._unit[:_FLOOR_CANDIDATES] * (self.domain.z_upper - self.domain.z_lower))
        base = float(np.sqrt(beta_t(t + 1, spec.beta_c1, spec.beta_c2)))

        def sigma_next(h: float) -> float:
            kern = self.base_kernel.with_lengthscales(e.lengthscales(h))
            K = kern(X, X)
            K[np.diag_indices(n)] += spec.noise_variance
            try:
                L = cholesky(K, lower=True, check_finite=False)
            except LinAlgError:
                return np.inf
            Kq = kern(P, X)
            mean = Kq @ cho_solve((L, True), self.gp.y_, check_finite=False)
            V = solve_triangular(L, Kq.T, lower=True, check_finite=False)
            sd = np.sqrt(np.maximum(kern.diag(P) - np.einsum("ij,ij->j", V, V), 0.0))
            i = int(np.argmax(mean + (base + e.norm_term(h)) * sd))
            return float(sd[i])

        return sigma_next

