"""The strategy presets and the exploration and trigger sections of the `optimizer:` mapping:
frozen dataclasses, each default written once, and their parsers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import validate
from .errors import SpecError

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
EXPLORATIONS = ("fixed", "adaptive", "agpucb")
TRIGGERS = ("robust", "paper")


def uses_event_trigger(m: Mapping) -> bool:
    """Whether an `optimizer:` mapping resets on the event trigger (ET-GP-UCB or `reset: event`)."""
    strategy = m.get("strategy", "et-gp-ucb")
    preset = STRATEGIES.get(strategy, (None,))[0] if isinstance(strategy, str) else None
    return (m.get("reset") or preset) == "event"


@dataclass(frozen=True)
class ExplorationSpec:
    """How the UCB weight evolves; see docs/configuration.md, *Exploration*.

    `adaptive`: `kappa0`, `[kappa_min, kappa_max]`, `lambda0` (`lambda_1`), `lambda_max`,
    `kappa_rate` (beta), `lambda_rate` (gamma), `ema` (eta), `mc_points`.
    `agpucb`: `norm_bound` (B_0), `exponent` (p(t) = t^exponent), `rule` (min | divide),
    `estimator` (one-step | bound | sigma-floor), `h_max`, `sigma_floor`, `bound_constant`.
    """

    type: str = "fixed"
    kappa0: float = 2.0
    kappa_min: float = 0.1
    kappa_max: float = 10.0
    lambda0: float = 0.01
    lambda_max: float = 1.0
    kappa_rate: float = 0.1
    lambda_rate: float = 0.05
    ema: float = 0.1
    mc_points: int = 1000
    norm_bound: float = 1.0
    exponent: float = 0.9
    rule: str = "min"
    estimator: str = "one-step"
    h_max: float = 100.0
    sigma_floor: float = 0.1
    bound_constant: float = 1.0


@dataclass(frozen=True)
class TriggerSpec:
    """The event trigger of `reset: event` (see `tvbod.core.trigger`, docs/configuration.md).

    `robust` (the default): the paper's point test plus the window test over `w = 2..window`,
    `refractory` steps without a reset after one, no hyperparameter refit while
    `|D| < min_points` (None: `2d + 2`; the fitted values are kept across a reset), no reset for
    a residual where D is uninformed (`sigma_D^2(x_t) >= uninformed * k(x_t, x_t)` on
    `|D| >= uninformed_from`; None: off; `uninformed_from` None: `min_points`), a refractory
    period that grows by `backoff` with each reset that follows the last one within
    `burst_steps` steps (1: fixed), and a `reset_burst` report past `burst_resets` resets in
    `burst_steps` steps. `uninformed`, `uninformed_from` and `backoff` are fixed by the
    behaviour version (`tvbod.core.behaviours`; the defaults are the newest version's).
    `paper`: the paper's Algorithm 1 exactly (point test only, refit on any dataset).
    """

    type: str = "robust"
    window: int = 3
    refractory: int = 3
    min_points: int | None = None
    burst_resets: int = 5
    burst_steps: int = 50
    uninformed: float | None = 0.5
    uninformed_from: int | None = 1
    backoff: float = 2.0

    @property
    def robust(self) -> bool:
        return self.type == "robust"


PAPER_TRIGGER = TriggerSpec("paper", window=1, refractory=0, min_points=1, uninformed=None,
                            backoff=1.0)

# ---------------------------------------------------------------------- parsers
_mapping, _check_keys, _number, _integer, _choice = (
    validate.mapping, validate.check_keys, validate.number, validate.integer, validate.choice)
_EXPLORE = ExplorationSpec()


_ADAPTIVE_KEYS = {"type", "kappa0", "kappa_min", "kappa_max", "lambda0", "lambda_max", "kappa_rate",
                  "lambda_rate", "ema", "mc_points"}
_AGPUCB_KEYS = {"type", "norm_bound", "exponent", "rule", "estimator", "h_max", "sigma_floor",
                "bound_constant"}


def parse_exploration(value, kernel) -> ExplorationSpec | None:
    """`exploration: {type: fixed | adaptive | agpucb, ...}` (None: fixed) for a `KernelSpec`."""
    m = _mapping(value, "exploration")
    kind = _choice(m.get("type", "fixed"), "exploration.type", EXPLORATIONS)
    if kind == "fixed":
        _check_keys(m, {"type"}, "exploration.")
        return None
    if kernel.type == "matrix":
        raise SpecError("exploration.type", f"{kind!r} needs a stationary kernel (se, matern52)",
                        "fixed")
    p = "exploration."
    if kind == "adaptive":
        _check_keys(m, _ADAPTIVE_KEYS, p)
        kmin = _number(m.get("kappa_min", _EXPLORE.kappa_min), p + "kappa_min", 0.0)
        kmax = _number(m.get("kappa_max", _EXPLORE.kappa_max), p + "kappa_max", kmin, lo_open=True)
        lmax = _number(m.get("lambda_max", _EXPLORE.lambda_max), p + "lambda_max", 0.0)
        return ExplorationSpec(
            "adaptive",
            kappa0=_number(m.get("kappa0", _EXPLORE.kappa0), p + "kappa0", kmin, kmax),
            kappa_min=kmin, kappa_max=kmax,
            lambda0=_number(m.get("lambda0", _EXPLORE.lambda0), p + "lambda0", 0.0, lmax),
            lambda_max=lmax,
            kappa_rate=_number(m.get("kappa_rate", _EXPLORE.kappa_rate), p + "kappa_rate", 0.0, 10.0),
            lambda_rate=_number(m.get("lambda_rate", _EXPLORE.lambda_rate), p + "lambda_rate", 0.0, 10.0),
            ema=_number(m.get("ema", _EXPLORE.ema), p + "ema", 0.0, 1.0, lo_open=True),
            mc_points=_integer(m.get("mc_points", _EXPLORE.mc_points), p + "mc_points", 1, 1 << 20),
        )
    _check_keys(m, _AGPUCB_KEYS, p)
    return ExplorationSpec(
        "agpucb",
        norm_bound=_number(m.get("norm_bound", _EXPLORE.norm_bound), p + "norm_bound", 0.0),
        exponent=_number(m.get("exponent", _EXPLORE.exponent), p + "exponent", 0.0, 1.0, lo_open=True,
                         hi_open=True),
        rule=_choice(m.get("rule", _EXPLORE.rule), p + "rule", ("min", "divide")),
        estimator=_choice(m.get("estimator", _EXPLORE.estimator), p + "estimator",
                          ("one-step", "bound", "sigma-floor")),
        h_max=_number(m.get("h_max", _EXPLORE.h_max), p + "h_max", 1.0, 1e6),
        sigma_floor=_number(m.get("sigma_floor", _EXPLORE.sigma_floor), p + "sigma_floor", 0.0, lo_open=True),
        bound_constant=_number(m.get("bound_constant", _EXPLORE.bound_constant), p + "bound_constant", 0.0,
                               lo_open=True),
    )


_TRIGGER_KEYS = {"type", "window", "refractory", "min_points", "burst", "uninformed",
                 "uninformed_from", "backoff"}


def parse_trigger(m: Mapping, event: bool) -> dict:
    """`trigger: robust | paper | {type: robust, window: 3, ...}` and `forgetting_floor: eps | auto`
    of the `optimizer:` mapping `m`; `event`: whether it resets on the event trigger."""
    for key in ("trigger", "forgetting_floor"):
        if key in m and not event:
            raise SpecError(key, "applies only with the event trigger (strategy et-gp-ucb or "
                            "reset: event)")
    if not event:
        return {}
    return {"trigger": _parse_trigger_kind(m.get("trigger", "robust")), **_parse_floor(m)}


def _parse_floor(m: Mapping) -> dict:
    """`forgetting_floor`: none, a fixed eps in (0, 1), or `auto` (learned from D)."""
    value = m.get("forgetting_floor")
    if value == "auto":
        return {"forgetting_floor": None, "learns_forgetting": True}
    if isinstance(value, str):
        raise SpecError("forgetting_floor", f"must be a number or auto, got {value!r}",
                        "(0, 1) or auto")
    floor = None if value is None else _number(value, "forgetting_floor", 0.0, 1.0, lo_open=True,
                                               hi_open=True)
    return {"forgetting_floor": floor, "learns_forgetting": False}


def _parse_trigger_kind(value) -> TriggerSpec:
    if isinstance(value, str):
        return TriggerSpec() if _choice(value, "trigger", TRIGGERS) == "robust" else PAPER_TRIGGER
    t = _mapping(value, "trigger")
    kind = _choice(t.get("type", "robust"), "trigger.type", TRIGGERS)
    if kind == "paper":
        _check_keys(t, {"type"}, "trigger.")
        return PAPER_TRIGGER
    _check_keys(t, _TRIGGER_KEYS, "trigger.")
    burst = _mapping(t.get("burst", {}), "trigger.burst")
    _check_keys(burst, {"resets", "steps"}, "trigger.burst.")
    d = TriggerSpec()
    min_points, uninformed = t.get("min_points"), t.get("uninformed", d.uninformed)
    since = t.get("uninformed_from", d.uninformed_from)
    if isinstance(since, str) and since != "min_points":
        raise SpecError("trigger.uninformed_from", f"must be an integer or min_points, got {since!r}",
                        "an integer >= 1, or min_points")
    return TriggerSpec(
        "robust",
        window=_integer(t.get("window", d.window), "trigger.window", 1, 100),
        refractory=_integer(t.get("refractory", d.refractory), "trigger.refractory", 0, 10000),
        min_points=None if min_points in (None, "auto") else _integer(min_points,
                                                                      "trigger.min_points", 1),
        burst_resets=_integer(burst.get("resets", d.burst_resets), "trigger.burst.resets", 1),
        burst_steps=_integer(burst.get("steps", d.burst_steps), "trigger.burst.steps", 1),
        uninformed=None if uninformed in (None, "off") else _number(
            uninformed, "trigger.uninformed", 0.0, 1.0, lo_open=True),
        uninformed_from=None if since == "min_points" else _integer(
            since, "trigger.uninformed_from", 1),
        backoff=_number(t.get("backoff", d.backoff), "trigger.backoff", 1.0, 10.0),
    )
