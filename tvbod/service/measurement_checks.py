"""Checks a measurement or an observed point passes before anything is journaled, and the value a
failed experiment is given: functions of the plant's configuration and strategy, used by
`PlantRuntime` (tvbod/service/plant.py) and `tvbod import`."""

from __future__ import annotations

import numpy as np

from tvbod.core import Strategy
from tvbod.core.errors import DomainError
from tvbod.protocol import ErrorCode, ProtocolError
from tvbod.service.config import PlantConfig


def observation_point(config: PlantConfig, strategy: Strategy, gains: dict,
                      request_id=None) -> np.ndarray:
    """The physical point of `gains` (every parameter by name, within its bounds), else
    `bad_field` / `out_of_bounds`. Shared by `observe` and `tvbod import`."""
    try:
        x = config.point(gains)
    except DomainError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(exc), request_id) from None
    try:
        strategy.domain.to_internal(x)
    except DomainError as exc:
        raise ProtocolError(ErrorCode.OUT_OF_BOUNDS, str(exc), request_id) from None
    return x


def guard_measurement(config: PlantConfig, strategy: Strategy, y: float, request_id,
                      what: str = "measurement") -> None:
    """Refuse, before anything is journaled, a measurement the plant cannot take (`bad_field`):
    beyond `max_measurement_abs` in measurement units (needs no scale, so it guards a
    calibrating plant's first measurements too); beyond `max_measurement_sigmas` prior
    standard deviations on the GP scale (a unit mistake or a garbage sensor value), once
    there is a scale to judge by; or one that would make the measurement map non-finite.
    Under `safety:` the last two judge the value the model records (the safety cap): a
    catastrophic measurement is a safety violation, recorded, not refused."""
    where = f"(plant file {config.path}); check the units, or send failed=true"
    if not abs(y) <= config.max_measurement_abs:
        raise ProtocolError(
            ErrorCode.BAD_FIELD, f"{what} {y!r} is beyond max_measurement_abs = "
            f"{config.max_measurement_abs:g} {where}", request_id)
    output = getattr(strategy, "output", None)  # None: no GP, no scale (random search)
    if output is None:
        return
    with np.errstate(all="ignore"):
        m = strategy.measured(y)
    if output.has_scale and m.told == y:
        limit = config.max_measurement_sigmas * float(np.sqrt(strategy.spec.kernel.variance))
        if not abs(m.internal) <= limit:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"{what} {y!r} is {abs(m.internal):.3g} prior standard deviations from the "
                f"plant's offset, beyond max_measurement_sigmas = "
                f"{config.max_measurement_sigmas:g} {where}", request_id)
    try:
        output.check(m.told)
    except DomainError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"{exc} {where}", request_id) from None


def failure_value(config: PlantConfig, strategy: Strategy, x: np.ndarray, request_id) -> float:
    """The measurement substituted for a failed experiment (the plant's `failure` policy),
    clipped into the range the measurement guard admits (a failure must always be
    recordable: it is the client's way out of a refused measurement), then guarded. Under
    `safety:` the safety cap (tvbod.core.safety)."""
    if getattr(strategy, "safety", None) is not None:
        return strategy.measured(0.0, failed=True).told
    policy = config.failure
    mean, std = strategy.predict(x) if policy.kind != "penalty" else (0.0, 0.0)
    y = policy.measurement(mean, std, config.sense)
    limit = config.max_measurement_abs
    y = float(np.clip(y, -limit, limit))
    output = getattr(strategy, "output", None)
    if output is not None and output.has_scale:
        band = (1.0 - 1e-9) * (config.max_measurement_sigmas  # inside, after round-off
                               * float(np.sqrt(strategy.spec.kernel.variance)) * output.scale_)
        y = float(np.clip(y, output.offset_ - band, output.offset_ + band))
    guard_measurement(config, strategy, y, request_id, what="the failure policy's measurement")
    return y
