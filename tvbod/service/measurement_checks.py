"""Checks a measurement or an observed point passes before anything is journaled, and the value a
failed experiment is given. Mixed into `PlantRuntime` (tvbod/service/plant.py); `observation_point`
is shared with `tvbod import`."""

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


class MeasurementChecks:
    """The measurement guard, the observed point's check and the failure value of a plant."""

    def _guard_measurement(self, y: float, request_id, what: str = "measurement") -> None:
        """Refuse, before anything is journaled, a measurement the plant cannot take (`bad_field`):
        beyond `max_measurement_abs` in measurement units (needs no scale, so it guards a
        calibrating plant's first measurements too); beyond `max_measurement_sigmas` prior
        standard deviations on the GP scale (a unit mistake or a garbage sensor value), once
        there is a scale to judge by; or one that would make the measurement map non-finite.
        Under `safety:` the last two judge the value the model records (the safety cap): a
        catastrophic measurement is a safety violation, recorded, not refused."""
        cfg = self.config
        where = f"(plant file {cfg.path}); check the units, or send failed=true"
        if not abs(y) <= cfg.max_measurement_abs:
            raise ProtocolError(
                ErrorCode.BAD_FIELD, f"{what} {y!r} is beyond max_measurement_abs = "
                f"{cfg.max_measurement_abs:g} {where}", request_id)
        output = getattr(self.strategy, "output", None)  # None: no GP, no scale (random search)
        if output is None:
            return
        capped = self.strategy.capped(y)
        y, at_cap = capped, capped != y
        if output.has_scale and not at_cap:
            limit = cfg.max_measurement_sigmas * float(np.sqrt(self.strategy.spec.kernel.variance))
            with np.errstate(all="ignore"):
                scaled = abs(self.strategy.to_internal_y(y))
            if not scaled <= limit:
                raise ProtocolError(
                    ErrorCode.BAD_FIELD,
                    f"{what} {y!r} is {scaled:.3g} prior standard deviations from the plant's "
                    f"offset, beyond max_measurement_sigmas = {cfg.max_measurement_sigmas:g} "
                    f"{where}", request_id)
        try:
            output.check(y)
        except DomainError as exc:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"{exc} {where}", request_id) from None

    def check_observation(self, gains: dict, request_id=None) -> np.ndarray:
        """The physical point of `gains` (see `observation_point`)."""
        return observation_point(self.config, self.strategy, gains, request_id)

    def _failure_value(self, x: np.ndarray, request_id) -> float:
        """The measurement substituted for a failed experiment (the plant's `failure` policy),
        clipped into the range the measurement guard admits (a failure must always be
        recordable: it is the client's way out of a refused measurement), then guarded."""
        if getattr(self.strategy, "safety", None) is not None:
            return self.strategy.capped(0.0, failed=True)  # the safety cap (tvbod.core.safety)
        policy = self.config.failure
        mean, std = self.strategy.predict(x) if policy.kind != "penalty" else (0.0, 0.0)
        y = policy.measurement(mean, std, self.config.sense)
        limit = self.config.max_measurement_abs
        y = float(np.clip(y, -limit, limit))
        output = getattr(self.strategy, "output", None)
        if output is not None and output.has_scale:
            band = (1.0 - 1e-9) * (self.config.max_measurement_sigmas  # inside, after round-off
                                   * float(np.sqrt(self.strategy.spec.kernel.variance))
                                   * output.scale_)
            y = float(np.clip(y, output.offset_ - band, output.offset_ + band))
        self._guard_measurement(y, request_id, what="the failure policy's measurement")
        return y
