"""The `optimizer:` mapping, parsed and validated once into a frozen `OptimizerSpec`.

Every error is a `SpecError` naming the offending key (dotted path) and the allowed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import validate
from .behaviours import refuse_fixed, spelled
from .errors import InvalidValue, SpecError
from .optimize import POLISHES, TOLERANCE
from .safety import SafetySpec, parse_safety
from .spec_model import (DEFAULT_NOISE_VARIANCE, HyperSpec, parse_hyper, parse_measurement,
                         parse_noise)
from .spec_sections import (RESET_POLICIES, STRATEGIES, ExplorationSpec, TriggerSpec,
                            parse_exploration, parse_trigger)

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
class OptimizerSpec:
    """A validated strategy configuration; `make_strategy` turns it into a `Strategy`."""

    domain: DomainSpec
    strategy: str = "et-gp-ucb"
    sense: str = "maximize"
    kernel: KernelSpec = field(default_factory=lambda: KernelSpec("se"))
    noise_variance: float = DEFAULT_NOISE_VARIANCE
    beta_c1: float = 0.4
    beta_c2: float = 4.0
    delta_b: float = 0.1
    reset_period: int | None = None
    forgetting: float | None = None
    drift_variance: float | None = None
    measurement_offset: float | None = None  # None: `auto` (calibrated, see `calibration.py`)
    measurement_scale: float | None = None  # None: `auto`
    calibration_points: int | None = None  # auto offset/scale: measurements used (None: max(20, 2d + 2))
    #: pessimism, relevel and tolerance are fixed by the behaviour version (`behaviours`).
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


def _parse_acquisition(value) -> tuple[str, float]:
    """`acquisition: ucb | ei` or `{type: ei, xi: 0.01}`."""
    if isinstance(value, str):
        return _choice(value, "acquisition", ACQUISITIONS), 0.0
    m = _mapping(value, "acquisition")
    kind = _choice(m.get("type", "ucb"), "acquisition.type", ACQUISITIONS)
    _check_keys(m, {"type", "xi"} if kind == "ei" else {"type"}, "acquisition.")
    return kind, _number(m.get("xi", _OPT.ei_xi), "acquisition.xi", 0.0)


def parse_spec(spec: Mapping | OptimizerSpec, settings: Mapping | None = None) -> OptimizerSpec:
    """Validate the `optimizer:` mapping (see docs/configuration.md) into an `OptimizerSpec`,
    under the behaviour version it names (`behaviour`; the newest without it). A fixed setting
    of the version in the mapping is refused; `settings` replaces some for an experiment
    (`tvbod.core.behaviours.spelled`)."""
    if isinstance(spec, OptimizerSpec):
        return spec
    try:
        m = _mapping(spec, "optimizer")
        refuse_fixed(m)
        return _parse_spec(spelled(m, settings))
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
    meas = parse_measurement(m.get("measurement", {}))
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
        **parse_noise(m.get("noise_variance"), meas, m.get("hyperparameters")),
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
        hyper=parse_hyper(m.get("hyperparameters", {}), kernel),
        reset=reset,
        **_parse_extensions(m, strategy, domain, kernel),
        **parse_trigger(m, (reset or STRATEGIES[strategy][0]) == "event"),
        **kw,
    )


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


