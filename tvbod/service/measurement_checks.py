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

    def _guard_measurement(self, y: float, request_id) -> None:
        """Refuse a measurement beyond `max_measurement_sigmas` prior standard deviations on the
        GP scale (a unit mistake or a garbage sensor value): `bad_field`, nothing applied. An
        auto-calibrated map has no scale before its second measurement: nothing to judge by."""
        output = getattr(self.strategy, "output", None)
        if output is not None and not output.has_scale:
            return
        limit = self.config.max_measurement_sigmas * float(np.sqrt(self.strategy.spec.kernel.variance))
        with np.errstate(all="ignore"):
            scaled = abs(self.strategy.to_internal_y(y))
        if not scaled <= limit:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"measurement {y!r} is {scaled:.3g} prior standard deviations from the plant's "
                f"offset, beyond max_measurement_sigmas = {self.config.max_measurement_sigmas:g} "
                f"(plant file {self.config.path}); check the units, or send failed=true",
                request_id)

    def check_observation(self, gains: dict, request_id=None) -> np.ndarray:
        """The physical point of `gains` (see `observation_point`)."""
        return observation_point(self.config, self.strategy, gains, request_id)

    def _failure_value(self, x: np.ndarray) -> float:
        """The measurement substituted for a failed experiment (the plant's `failure` policy)."""
        policy = self.config.failure
        mean, std = self.strategy.predict(x) if policy.kind != "penalty" else (0.0, 0.0)
        return policy.measurement(mean, std, self.config.sense)
