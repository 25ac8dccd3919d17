"""The model sections of the `optimizer:` mapping: the online MAP hyperparameters
(`HyperSpec`), the measurement map to the GP's scale and the noise variance; parsed into the
keyword arguments of `tvbod.core.spec.OptimizerSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import validate
from .errors import SpecError

#: `noise_variance` on the GP scale where it is not estimated.
DEFAULT_NOISE_VARIANCE = 0.02

_mapping, _check_keys, _number, _integer, _choice, _vector = (
    validate.mapping, validate.check_keys, validate.number, validate.integer, validate.choice,
    validate.vector)


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
    #: The three below are fixed by the behaviour version (`tvbod.core.behaviours`; the defaults
    #: are the newest version's). Skip a refit when the projected gradient of the log posterior
    #: at the current values is at most this (nats per unit of log theta; L-BFGS-B's own
    #: stopping test); 0: always refit.
    refit_tolerance: float = 0.05
    #: Where a refit's L-BFGS-B runs stop (`REFIT_STOPS`): `tolerance`, at the projected gradient
    #: `refit_tolerance` that also skips a refit; `scipy`, at SciPy's default (`gtol` 1e-5).
    refit_stop: str = "tolerance"
    #: How the objective is evaluated (`tvbod.core.hyperparameters.OBJECTIVES`): `factored`, or
    #: `explicit-inverse` (`cho_solve(L, I)` and the `(d, n, n)` gradient tensor).
    objective: str = "factored"


_HYPER = HyperSpec()

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


def parse_hyper(value, kernel) -> HyperSpec | None:
    """`hyperparameters:` for a `KernelSpec` (None: fixed lengthscales)."""
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


def default_noise_variance(calibrates: bool, hyper) -> float | str:
    """`noise_variance`'s default: `auto` with an auto measurement map (`calibrates`), unless the
    MAP refit learns the noise (`hyperparameters.noise_variance: map` in the mapping `hyper`);
    else the fixed 0.02 on the GP's scale."""
    hyper_noise = isinstance(hyper, Mapping) and hyper.get("noise_variance") == "map"
    return "auto" if calibrates and not hyper_noise else DEFAULT_NOISE_VARIANCE


def parse_noise(value, meas: dict, hyper) -> dict:
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
        return {"noise_variance": DEFAULT_NOISE_VARIANCE, "learns_noise": True}
    return {"noise_variance": _number(value, "noise_variance", 0.0, lo_open=True),
            "learns_noise": False}


def parse_measurement(value) -> dict:
    """`measurement: auto | {offset: number | auto, scale: number | auto, calibration_points: n}`:
    the map to the GP's scale, `internal = sign (y - offset) / scale`. `auto` estimates the offset
    (the mean, moved `pessimism` scales to the worse side) and scale (standard deviation) from the
    first `calibration_points` measurements and then keeps them, across resets too
    (`calibration.py`). `pessimism` and `relevel`, an auto offset's fixed settings, come from the
    behaviour version (`behaviours.spelled` writes them in)."""
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
    kept = {}
    if "relevel" in meas:
        if not isinstance(meas["relevel"], bool):
            raise SpecError("measurement.relevel", f"must be true or false, got {meas['relevel']!r}")
        kept["relevel"] = meas["relevel"]
    if "pessimism" in meas:
        kept["pessimism"] = _number(meas["pessimism"], "measurement.pessimism", 0.0, 10.0)
    points = meas.get("calibration_points")
    return {
        "measurement_offset": None if offset == "auto" else _number(offset, "measurement.offset"),
        "measurement_scale": None if scale == "auto" else _number(scale, "measurement.scale", 0.0,
                                                                  lo_open=True),
        "calibration_points": None if points in (None, "auto") else _integer(
            points, "measurement.calibration_points", 2, 100000),
        **kept,
    }
