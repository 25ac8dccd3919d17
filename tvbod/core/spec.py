"""The `optimizer:` mapping, parsed and validated once into a frozen `OptimizerSpec`.

Every error is a `SpecError` naming the offending key (dotted path) and the allowed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import validate
from .errors import InvalidValue, SpecError
from .optimize import POLISHES, TOLERANCE
from .safety import SafetySpec, parse_safety
from .spec_sections import (EXPLORATIONS, PAPER_TRIGGER, TRIGGERS,  # noqa: F401 (re-exported)
                            ExplorationSpec, TriggerSpec, parse_exploration, parse_trigger)

#: Strategy presets: (reset policy, temporal factor) — see `strategies.gpucb`.
STRATEGIES = {
    "et-gp-ucb": ("event", None),
    "gp-ucb": ("none", None),
    "r-gp-ucb": ("periodic", None),
    "tv-gp-ucb": ("none", "forgetting"),
    "ui-tvbo": ("none", "drift"),
    "random-search": ("none", None),  # Sobol random search: a baseline, no GP
}
RESET_POLICIES = ("event", "periodic", "none")
ACQUISITIONS = ("ucb", "ei")
#: Keys that only one strategy uses, and which.
_STRATEGY_KEYS = {"reset_period": "r-gp-ucb", "forgetting": "tv-gp-ucb", "drift_variance": "ui-tvbo"}
_TOP_KEYS = {
    "strategy", "sense", "domain", "kernel", "noise_variance", "beta", "delta_b", "reset_period",
    "forgetting", "drift_variance", "measurement", "budget", "seed", "hyperparameters",
    "reset", "acquisition", "exploration", "trigger", "forgetting_floor", "safety",
}
#: Default measurements that fix `measurement: auto` (at least 2d + 2; why this many:
#: docs/configuration.md, *Measurement scaling*).
CALIBRATION_POINTS = 20
#: Largest finite domain whose Gram matrix is precomputed (m^2 float64 = 200 MB at 5000).
MAX_FINITE_POINTS = 5000


@dataclass(frozen=True)
class DomainSpec:
    type: str  # box | points | arms
    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()
    scaling: tuple[float, ...] | None = None
    points: tuple[tuple[float, ...], ...] = ()
    n_arms: int = 0


@dataclass(frozen=True)
class KernelSpec:
    type: str  # se | matern52 | matrix
    lengthscales: tuple[float, ...] = (0.2,)
    variance: float = 1.0
    matrix: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class HyperSpec:
    """Online MAP estimation of the lengthscales: Gamma(`prior_shape`, `prior_rate`) prior on each,
    bounded to `[lower, upper]`, refit after every `refit_every`-th tell from the current values
    plus `restarts` draws from the prior, L-BFGS-B with `maxiter`."""

    prior_shape: float = 15.0
    prior_rate: float = 10.0 / 3.0
    lower: float = 1e-2
    upper: float = 1e2
    refit_every: int = 1
    restarts: int = 0
    maxiter: int = 50
    #: The signal variance sigma_f^2 and the noise variance sigma_n^2 fitted with the lengthscales
    #: (log-uniform priors on these bounds); None: fixed (the default).
    variance_bounds: tuple[float, float] | None = None
    noise_bounds: tuple[float, float] | None = None
    #: Skip a refit when the projected gradient of the log posterior at the current values is at
    #: most this (nats per unit of log theta; L-BFGS-B's own stopping test); 0: always refit.
    refit_tolerance: float = 0.05
    #: Where a refit's L-BFGS-B runs stop (`REFIT_STOPS`): `tolerance`, at the projected gradient
    #: `refit_tolerance` that also skips a refit; `scipy`, at SciPy's default (`gtol` 1e-5, what a
    #: stored configuration without the key means).
    refit_stop: str = "tolerance"
    #: How the objective is evaluated (`tvbod.core.hyperparameters.OBJECTIVES`): `factored`, or
    #: `explicit-inverse`, tvbod 0.2's (what a stored configuration without the key means).
    objective: str = "factored"


@dataclass(frozen=True)
class OptimizerSpec:
    """A validated strategy configuration; `make_strategy` turns it into a `Strategy`."""

    domain: DomainSpec
    strategy: str = "et-gp-ucb"
    sense: str = "maximize"
    kernel: KernelSpec = field(default_factory=lambda: KernelSpec("se"))
    noise_variance: float = 0.02
    beta_c1: float = 0.4
    beta_c2: float = 4.0
    delta_b: float = 0.1
    reset_period: int | None = None
    forgetting: float | None = None
    drift_variance: float | None = None
    measurement_offset: float | None = None  # None: `auto` (calibrated, see `calibration.py`)
    measurement_scale: float | None = None  # None: `auto`
    calibration_points: int | None = None  # auto offset/scale: measurements used (None: max(20, 2d + 2))
    pessimism: float = 1.0  # auto offset: this many scales on the worse side of the mean
    #: auto offset: during the refractory period after a reset it follows the mean of the new
    #: dataset's measurements (`OutputMap.relevel`), not only the reset's one measurement
    relevel: bool = True
    candidates: int = 1024
    starts: int = 5
    maxiter: int = 50
    polish: str = "lbfgsb-joint"  # `budget.polish`: one of `optimize.POLISHES`
    tolerance: float = TOLERANCE  # `budget.tolerance`: the polish's relative improvement tolerance
    seed: int = 0
    hyper: HyperSpec | None = None
    reset: str | None = None  # overrides the preset's reset policy
    acquisition: str = "ucb"
    ei_xi: float = 0.0
    exploration: ExplorationSpec | None = None  # None: fixed beta_t (the presets' behaviour)
    trigger: TriggerSpec | None = None  # the event trigger (None unless reset_policy is event)
    forgetting_floor: float | None = None  # ET with TV-GP-UCB's forgetting factor eps
    #: `forgetting_floor: auto`: eps learned from D after every tell (`fit_forgetting`)
    learns_forgetting: bool = False
    #: `noise_variance: auto`: sigma_n^2 estimated once, from the measurements that calibrate the
    #: measurement map (`fit_noise`); `noise_variance` is the value in force until then
    learns_noise: bool = False
    #: `safety:` (`tvbod.core.safety`): proposals only from the certified safe set; None: off
    safety: SafetySpec | None = None

    @property
    def reset_policy(self) -> str:
        return self.reset if self.reset is not None else STRATEGIES[self.strategy][0]

    @property
    def temporal(self) -> str | None:
        if self.forgetting_floor is not None or self.learns_forgetting:
            return "forgetting"
        return STRATEGIES[self.strategy][1]

    @property
    def forgetting_eps(self) -> float | None:
        """The forgetting factor's eps: TV-GP-UCB's `forgetting` or ET's `forgetting_floor` (0, no
        forgetting, until a learned floor has data: `learns_forgetting`)."""
        if self.forgetting is not None:
            return self.forgetting
        return 0.0 if self.learns_forgetting else self.forgetting_floor

    @property
    def min_points(self) -> int:
        """Smallest |D| on which hyperparameters are refit (1: any non-empty dataset)."""
        t = self.trigger
        if t is None or not t.robust:
            return 1
        return t.min_points if t.min_points is not None else 2 * self.dim + 2

    @property
    def calibrates(self) -> bool:
        """Whether `measurement.offset` or `.scale` is `auto` (the output is standardized)."""
        return self.measurement_offset is None or self.measurement_scale is None

    @property
    def n_calibration(self) -> int:
        """How many measurements fix an `auto` offset/scale (`measurement.calibration_points`)."""
        n = self.calibration_points
        return n if n is not None else max(CALIBRATION_POINTS, 2 * self.dim + 2)

    @property
    def dim(self) -> int:
        d = self.domain
        return len(d.lower) if d.type == "box" else (len(d.points[0]) if d.type == "points" else 1)


# ---------------------------------------------------------------------- small validators
# The kit shared with the daemon's configuration files (tvbod/core/validate.py); `parse_spec`
# reports what they find as `SpecError`. Defaults are read from the dataclasses above.
_mapping, _check_keys, _number, _integer, _choice, _vector, _matrix = (
    validate.mapping, validate.check_keys, validate.number, validate.integer, validate.choice,
    validate.vector, validate.matrix)
_OPT, _KERNEL = validate.defaults(OptimizerSpec), validate.defaults(KernelSpec)
_HYPER = HyperSpec()


# ---------------------------------------------------------------------- sections
def _parse_domain(value) -> DomainSpec:
    m = _mapping(value, "domain")
    kind = _choice(m.get("type", "box"), "domain.type", ("box", "points", "arms"))
    if kind == "box":
        _check_keys(m, {"type", "lower", "upper", "scaling"}, "domain.")
        for req in ("lower", "upper"):
            if req not in m:
                raise SpecError(f"domain.{req}", "is required for a box domain")
        lower = _vector(m["lower"], "domain.lower")
        upper = _vector(m["upper"], "domain.upper", len(lower))
        for i, (a, b) in enumerate(zip(lower, upper)):
            if not a < b:
                raise SpecError(f"domain.upper[{i}]", f"{b} must be greater than lower {a}")
        scaling = None
        if m.get("scaling") is not None:
            scaling = _vector(m["scaling"], "domain.scaling", len(lower))
            for i, s in enumerate(scaling):
                _number(s, f"domain.scaling[{i}]", 0.0, lo_open=True)
        return DomainSpec("box", lower, upper, scaling)
    if kind == "points":
        _check_keys(m, {"type", "points", "scaling"}, "domain.")
        if "points" not in m:
            raise SpecError("domain.points", "is required for a points domain")
        p = _matrix(m["points"], "domain.points")
        if len(p) > MAX_FINITE_POINTS:
            raise SpecError("domain.points", f"has {len(p)} points", f"at most {MAX_FINITE_POINTS}")
        scaling = None
        if m.get("scaling") is not None:
            scaling = _vector(m["scaling"], "domain.scaling", p.shape[1])
            for i, s in enumerate(scaling):
                _number(s, f"domain.scaling[{i}]", 0.0, lo_open=True)
        return DomainSpec("points", points=tuple(map(tuple, p.tolist())), scaling=scaling)
    _check_keys(m, {"type", "n_arms"}, "domain.")
    if "n_arms" not in m:
        raise SpecError("domain.n_arms", "is required for an arms domain")
    return DomainSpec("arms", n_arms=_integer(m["n_arms"], "domain.n_arms", 1, MAX_FINITE_POINTS))


def _parse_kernel(value, domain: DomainSpec, dim: int) -> KernelSpec:
    m = _mapping(value, "kernel")
    default = "matrix" if domain.type == "arms" else "se"
    kind = _choice(m.get("type", default), "kernel.type", ("se", "matern52", "matrix"))
    if domain.type == "arms" and kind != "matrix":
        raise SpecError("kernel.type", f"{kind!r} needs coordinates; an arms domain needs", "matrix")
    if kind == "matrix":
        if domain.type != "arms":
            raise SpecError("kernel.type", "'matrix' is for an arms domain", "se, matern52")
        _check_keys(m, {"type", "matrix"}, "kernel.")
        if "matrix" not in m:
            raise SpecError("kernel.matrix", "is required for a matrix kernel")
        K = _matrix(m["matrix"], "kernel.matrix")
        if K.shape != (domain.n_arms, domain.n_arms):
            raise SpecError("kernel.matrix", f"has shape {K.shape}",
                            f"({domain.n_arms}, {domain.n_arms}) to match domain.n_arms")
        if not np.allclose(K, K.T, rtol=1e-8, atol=1e-10 * np.abs(K).max()):
            raise SpecError("kernel.matrix", "is not symmetric")
        eig = np.linalg.eigvalsh(K)
        if eig[0] < -1e-8 * max(eig[-1], 1e-300):
            raise SpecError("kernel.matrix", f"is not positive semi-definite (eigenvalue {eig[0]:.3g})")
        return KernelSpec("matrix", matrix=tuple(map(tuple, K.tolist())))
    _check_keys(m, {"type", "lengthscales", "variance"}, "kernel.")
    ls = _vector(m.get("lengthscales", list(_KERNEL.lengthscales)), "kernel.lengthscales")
    if len(ls) == 1:
        ls = ls * dim
    if len(ls) != dim:
        raise SpecError("kernel.lengthscales", f"has {len(ls)} values", f"1 or {dim} (the dimension)")
    for i, v in enumerate(ls):
        _number(v, f"kernel.lengthscales[{i}]", 0.0, lo_open=True)
    var = _number(m.get("variance", _KERNEL.variance), "kernel.variance", 0.0, lo_open=True)
    return KernelSpec(kind, lengthscales=ls, variance=var)


_HYPER_KEYS = {"lengthscales", "prior", "bounds", "refit_every", "restarts", "maxiter", "variance",
               "noise_variance", "variance_bounds", "noise_bounds", "refit_tolerance", "objective",
               "refit_stop"}
OBJECTIVES = ("factored", "explicit-inverse")
REFIT_STOPS = ("tolerance", "scipy")
#: Default bounds of the learned signal and noise variances (GP scale; wide: scale-free in effect).
VARIANCE_BOUNDS, NOISE_BOUNDS = (1e-3, 1e3), (1e-6, 1.0)


def _variance_bounds(m: Mapping, key: str, default: tuple) -> tuple | None:
    """`hyperparameters.<key>: map | fixed` and its `<key>_bounds` (None when fixed)."""
    bkey = "variance_bounds" if key == "variance" else "noise_bounds"
    mode = _choice(m.get(key, "fixed"), f"hyperparameters.{key}", ("fixed", "map"))
    if mode == "fixed":
        if bkey in m:
            raise SpecError(f"hyperparameters.{bkey}", f"applies only with {key}: map")
        return None
    b = _vector(m.get(bkey, list(default)), f"hyperparameters.{bkey}", 2)
    lo = _number(b[0], f"hyperparameters.{bkey}[0]", 0.0, lo_open=True)
    return lo, _number(b[1], f"hyperparameters.{bkey}[1]", lo, lo_open=True)


def _parse_hyper(value, kernel: KernelSpec) -> HyperSpec | None:
    m = _mapping(value, "hyperparameters")
    _check_keys(m, _HYPER_KEYS, "hyperparameters.")
    mode = _choice(m.get("lengthscales", "fixed"), "hyperparameters.lengthscales", ("fixed", "map"))
    if mode == "fixed":
        extra = sorted(set(m) - {"lengthscales"})
        if extra:
            raise SpecError(f"hyperparameters.{extra[0]}", "applies only with lengthscales: map")
        return None
    if kernel.type == "matrix":
        raise SpecError("hyperparameters.lengthscales", "a matrix kernel has no lengthscales", "fixed")
    prior = _mapping(m.get("prior", {}), "hyperparameters.prior")
    _check_keys(prior, {"shape", "rate"}, "hyperparameters.prior.")
    bounds = _vector(m.get("bounds", [_HYPER.lower, _HYPER.upper]), "hyperparameters.bounds", 2)
    lo = _number(bounds[0], "hyperparameters.bounds[0]", 0.0, lo_open=True)
    hi = _number(bounds[1], "hyperparameters.bounds[1]", lo, lo_open=True)
    return HyperSpec(
        prior_shape=_number(prior.get("shape", _HYPER.prior_shape), "hyperparameters.prior.shape",
                            0.0, lo_open=True),
        prior_rate=_number(prior.get("rate", _HYPER.prior_rate), "hyperparameters.prior.rate",
                           0.0, lo_open=True),
        lower=lo, upper=hi,
        refit_every=_integer(m.get("refit_every", _HYPER.refit_every),
                             "hyperparameters.refit_every", 1),
        restarts=_integer(m.get("restarts", _HYPER.restarts), "hyperparameters.restarts", 0, 100),
        maxiter=_integer(m.get("maxiter", _HYPER.maxiter), "hyperparameters.maxiter", 1, 10000),
        variance_bounds=_variance_bounds(m, "variance", VARIANCE_BOUNDS),
        noise_bounds=_variance_bounds(m, "noise_variance", NOISE_BOUNDS),
        refit_tolerance=_number(m.get("refit_tolerance", _HYPER.refit_tolerance),
                                "hyperparameters.refit_tolerance", 0.0, 1e3),
        refit_stop=_choice(m.get("refit_stop", _HYPER.refit_stop), "hyperparameters.refit_stop",
                           REFIT_STOPS),
        objective=_choice(m.get("objective", _HYPER.objective), "hyperparameters.objective",
                          OBJECTIVES),
    )


def _parse_acquisition(value) -> tuple[str, float]:
    """`acquisition: ucb | ei` or `{type: ei, xi: 0.01}`."""
    if isinstance(value, str):
        return _choice(value, "acquisition", ACQUISITIONS), 0.0
    m = _mapping(value, "acquisition")
    kind = _choice(m.get("type", "ucb"), "acquisition.type", ACQUISITIONS)
    _check_keys(m, {"type", "xi"} if kind == "ei" else {"type"}, "acquisition.")
    return kind, _number(m.get("xi", _OPT.ei_xi), "acquisition.xi", 0.0)


def parse_spec(spec: Mapping | OptimizerSpec) -> OptimizerSpec:
    """Validate the `optimizer:` mapping (see docs/configuration.md) into an `OptimizerSpec`."""
    if isinstance(spec, OptimizerSpec):
        return spec
    try:
        return _parse_spec(spec)
    except SpecError:
        raise
    except InvalidValue as e:  # from the validator kit
        raise SpecError(e.key, e.problem, e.allowed) from None


def _parse_spec(spec: Mapping) -> OptimizerSpec:
    m = _mapping(spec, "optimizer")
    _check_keys(m, _TOP_KEYS, "")
    strategy = _choice(m.get("strategy", _OPT.strategy), "strategy", tuple(STRATEGIES))
    reset = None
    if m.get("reset") is not None:
        reset = _choice(m["reset"], "reset", RESET_POLICIES)
        if strategy == "random-search":
            raise SpecError("reset", "does not apply to strategy 'random-search'")
        if reset == "periodic" and "reset_period" not in m:
            raise SpecError("reset_period", "is required with reset: periodic")
        if reset != "periodic" and strategy == "r-gp-ucb":
            raise SpecError("reset", f"{reset!r} contradicts strategy 'r-gp-ucb'", "periodic")
    for key, owner in _STRATEGY_KEYS.items():
        if key == "reset_period" and reset == "periodic":
            continue
        if key in m and owner != strategy:
            raise SpecError(key, f"applies to strategy {owner!r}, not {strategy!r}")
        if owner == strategy and key not in m:
            raise SpecError(key, f"is required for strategy {strategy!r}")
    if "domain" not in m:
        raise SpecError("domain", "is required")
    domain = _parse_domain(m["domain"])
    dim = {"box": len(domain.lower), "points": len(domain.points[0]) if domain.points else 0,
           "arms": 1}[domain.type]
    kernel = _parse_kernel(m.get("kernel", {}), domain, dim)
    beta = _mapping(m.get("beta", {}), "beta")
    _check_keys(beta, {"c1", "c2"}, "beta.")
    meas = _parse_measurement(m.get("measurement", {}))
    budget = _mapping(m.get("budget", {}), "budget")
    _check_keys(budget, {"candidates", "starts", "maxiter", "polish", "tolerance"}, "budget.")
    kw = {}
    if strategy == "r-gp-ucb" or reset == "periodic":
        kw["reset_period"] = _integer(m["reset_period"], "reset_period", 1)
    if strategy == "tv-gp-ucb":
        kw["forgetting"] = _number(m["forgetting"], "forgetting", 0.0, 1.0, lo_open=True, hi_open=True)
    if strategy == "ui-tvbo":
        kw["drift_variance"] = _number(m["drift_variance"], "drift_variance", 0.0, lo_open=True)
    sense = _choice(m.get("sense", _OPT.sense), "sense", ("maximize", "minimize"))
    if m.get("safety") is not None:
        kw["safety"] = parse_safety(m["safety"], sense, domain, strategy)
    return OptimizerSpec(
        domain=domain,
        strategy=strategy,
        sense=sense,
        kernel=kernel,
        **_parse_noise(m.get("noise_variance"), meas, m.get("hyperparameters")),
        beta_c1=_number(beta.get("c1", _OPT.beta_c1), "beta.c1", 0.0),
        beta_c2=_number(beta.get("c2", _OPT.beta_c2), "beta.c2", 1.0),
        delta_b=_number(m.get("delta_b", _OPT.delta_b), "delta_b", 0.0, 1.0, lo_open=True,
                        hi_open=True),
        **meas,
        candidates=_integer(budget.get("candidates", _OPT.candidates), "budget.candidates", 1,
                            1 << 20),
        starts=_integer(budget.get("starts", _OPT.starts), "budget.starts", 1, 1000),
        maxiter=_integer(budget.get("maxiter", _OPT.maxiter), "budget.maxiter", 0, 10000),
        polish=_choice(budget.get("polish", _OPT.polish), "budget.polish", POLISHES),
        tolerance=_number(budget.get("tolerance", _OPT.tolerance), "budget.tolerance", 0.0, 0.1),
        seed=_integer(m.get("seed", _OPT.seed), "seed", 0, 2**63 - 1),
        hyper=_parse_hyper(m.get("hyperparameters", {}), kernel),
        reset=reset,
        **_parse_extensions(m, strategy, domain, kernel),
        **parse_trigger(m, (reset or STRATEGIES[strategy][0]) == "event"),
        **kw,
    )


def default_noise_variance(calibrates: bool, hyper) -> float | str:
    """`noise_variance`'s default: `auto` with an auto measurement map (`calibrates`), unless the
    MAP refit learns the noise (`hyperparameters.noise_variance: map` in the mapping `hyper`);
    else the fixed 0.02 on the GP's scale."""
    hyper_noise = isinstance(hyper, Mapping) and hyper.get("noise_variance") == "map"
    return "auto" if calibrates and not hyper_noise else _OPT.noise_variance


def _parse_noise(value, meas: dict, hyper) -> dict:
    """`noise_variance: number | auto` (default: `default_noise_variance`). `auto` estimates it
    once, from the calibration measurements."""
    calibrates = meas["measurement_offset"] is None or meas["measurement_scale"] is None
    hyper_noise = isinstance(hyper, Mapping) and hyper.get("noise_variance") == "map"
    if value is None:
        value = default_noise_variance(calibrates, hyper)
    if value == "auto":
        if not calibrates:
            raise SpecError("noise_variance", "auto is estimated from the measurements that "
                            "calibrate an auto measurement map; with a fixed map give a number")
        if hyper_noise:
            raise SpecError("noise_variance", "auto contradicts hyperparameters.noise_variance: "
                            "map (the refit learns it)")
        return {"noise_variance": _OPT.noise_variance, "learns_noise": True}
    return {"noise_variance": _number(value, "noise_variance", 0.0, lo_open=True),
            "learns_noise": False}


def _parse_measurement(value) -> dict:
    """`measurement: auto | {offset: number | auto, scale: number | auto, calibration_points: n,
    pessimism: k}`: the map to the GP's scale, `internal = sign (y - offset) / scale`. `auto`
    estimates the offset (the mean, moved `pessimism` scales to the worse side) and scale (standard
    deviation) from the first `calibration_points` measurements and then keeps them, across
    resets too (`calibration.py`). `auto` is the default of both: a plant that names only its
    parameters' bounds is measured on its own scale."""
    if value == "auto":
        value = {"offset": "auto", "scale": "auto"}
    meas = _mapping(value, "measurement")
    _check_keys(meas, {"offset", "scale", "calibration_points", "pessimism", "relevel"},
                "measurement.")
    offset, scale = meas.get("offset", "auto"), meas.get("scale", "auto")
    auto = offset == "auto" or scale == "auto"
    if "calibration_points" in meas and not auto:
        raise SpecError("measurement.calibration_points", "applies only with offset or scale auto")
    for key in ("pessimism", "relevel"):
        if key in meas and offset != "auto":
            raise SpecError(f"measurement.{key}", "applies only with offset auto")
    relevel = meas.get("relevel", _OPT.relevel)
    if not isinstance(relevel, bool):
        raise SpecError("measurement.relevel", f"must be true or false, got {relevel!r}")
    points = meas.get("calibration_points")
    return {
        "measurement_offset": None if offset == "auto" else _number(offset, "measurement.offset"),
        "measurement_scale": None if scale == "auto" else _number(scale, "measurement.scale", 0.0,
                                                                  lo_open=True),
        "calibration_points": None if points in (None, "auto") else _integer(
            points, "measurement.calibration_points", 2, 100000),
        "pessimism": _number(meas.get("pessimism", _OPT.pessimism), "measurement.pessimism", 0.0,
                             10.0),
        "relevel": relevel,
    }


def _parse_extensions(m: Mapping, strategy: str, domain: DomainSpec, kernel: KernelSpec) -> dict:
    """`acquisition` and `exploration`, checked against each other and the strategy."""
    acq, xi = _parse_acquisition(m.get("acquisition", _OPT.acquisition))
    exploration = parse_exploration(m.get("exploration", {}), kernel)
    if strategy == "random-search" and ("acquisition" in m or "exploration" in m):
        key = "acquisition" if "acquisition" in m else "exploration"
        raise SpecError(key, "does not apply to strategy 'random-search'")
    if acq == "ei" and exploration is not None:
        raise SpecError("exploration.type", "EI has no exploration weight", "fixed (with acquisition: ei)")
    if exploration is not None and domain.type == "arms":
        raise SpecError("exploration.type", "needs coordinates, not arms", "fixed")
    return {"acquisition": acq, "ei_xi": xi, "exploration": exploration}


def uses_event_trigger(m: Mapping) -> bool:
    """Whether an `optimizer:` mapping resets on the event trigger (ET-GP-UCB or `reset: event`)."""
    strategy = m.get("strategy", "et-gp-ucb")
    preset = STRATEGIES.get(strategy, (None,))[0] if isinstance(strategy, str) else None
    return (m.get("reset") or preset) == "event"
