"""The events a tell or an observation writes to the plant's event log: `measurement` (the
plant's complete history, which `tvbod replay` reads back), `reset`, `reset_burst`,
`safety_violation` and `measurement_out_of_range` (docs/events.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tvbod.core import Strategy
from tvbod.service.config import PlantConfig
from tvbod.service.events import PlantEventLog
from tvbod.service.transition import Applied

#: |measurement on the GP scale| beyond this many prior standard deviations earns a warning.
_OUT_OF_RANGE_SIGMAS = 4.0


class TellEvents:
    """Writes what applying a tell or an observation did (an `Applied`) as events; remembers
    the regime whose `measurement_out_of_range` warning was given."""

    def __init__(self, events: PlantEventLog) -> None:
        self.events = events
        #: the first step of the regime that had its `measurement_out_of_range` warning
        self.out_of_range_regime: int | None = None

    def emit(self, applied: Applied, strategy: Strategy, config: PlantConfig,
             replayed: bool = False) -> None:
        """The events of `applied` (a tell or an observation) under the plant's `strategy` and
        `config`.

        On restore, journaled tells are emitted again with `replayed: true`: a crash may have
        struck between the journal write and the event line; readers dedupe by `proposal_id`.
        """
        ev, result, record = self.events, applied.result, applied.record
        extra = {"replayed": True} if replayed else {}
        ev.emit("measurement", t=result.t, proposal_id=record["id"], x=record["x"],
                gains=config.gains(np.asarray(record["x"])), measurement=record["y"],
                failed=record["failed"], raw_measurement=record["measurement"], psi=result.psi,
                threshold=result.threshold, mu=result.mu, sigma=result.sigma, reset=result.reset,
                t_prime=result.t_prime, dataset_size=result.dataset_size,
                metadata=record.get("metadata") or None, **_window_fields(result),
                **_safety_fields(strategy, result),
                **({"observed": True} if record["kind"] == "observe" else {}), **extra)
        if result.reset:
            ev.emit("reset", level="warning", t=result.t, t_prime=result.t_prime, psi=result.psi,
                    threshold=result.threshold, reason=result.reset_reason,
                    dataset_size_before=applied.size_before,
                    dataset_size_after=result.dataset_size, **_window_fields(result),
                    **({"backup": config.gains(np.asarray(result.backup))}
                       if result.backup is not None else {}), **extra)
        if result.reset_burst and not replayed:
            trig = strategy.spec.trigger
            hold = strategy.trigger.hold
            ev.emit("reset_burst", level="warning", t=result.t, resets=trig.burst_resets + 1,
                    within_steps=trig.burst_steps, refractory_steps=hold,
                    hint="resets faster than the trigger's burst rate: the model does not fit the "
                    f"measurements; no reset for the next {hold} steps (the refractory backoff). Check "
                    "the measurement map and lengthscales (docs/configuration.md, Measurement "
                    "scaling)")
        if not replayed:
            self._warn_out_of_range(result, record["y"], strategy.spec)
        if result.safety_violation and not replayed:
            safety = strategy.spec.safety
            ev.emit("safety_violation", level="warning", t=result.t, proposal_id=record["id"],
                    gains=config.gains(np.asarray(record["x"])),
                    measurement=record["measurement"], threshold=safety.threshold,
                    failed=record["failed"], violations=strategy.safety.violations,
                    hint="the measurement crossed optimizer.safety's threshold (or the experiment "
                    "failed): the point and its neighbourhood leave the safe set. Frequent "
                    "violations: raise safety.sigmas or lower safety.max_step "
                    "(docs/configuration.md, Safe tuning)")

    def _warn_out_of_range(self, result, y: float, spec) -> None:
        """`measurement_out_of_range`, at most once per regime (the steps since the last reset):
        a measurement the model recorded more than `_OUT_OF_RANGE_SIGMAS` prior standard
        deviations from the GP's prior mean (`result.scaled`), with a hint that fits how the
        measurement map was set."""
        regime = result.t - result.t_prime
        if result.scaled is None or self.out_of_range_regime == regime:
            return
        if abs(result.scaled) <= _OUT_OF_RANGE_SIGMAS * float(np.sqrt(spec.kernel.variance)):
            return
        self.out_of_range_regime = regime
        self.events.emit("measurement_out_of_range", level="warning", t=result.t, measurement=y,
                         scaled=result.scaled, regime_start=regime, hint=_range_hint(spec))


def _safety_fields(strategy: Strategy, result) -> dict[str, Any]:
    """A `measurement` event's safety fields (plants with `safety:`): whether it violated the
    threshold and the safe set's share of the box."""
    if strategy.spec.safety is None:
        return {}
    return {"safety_violation": result.safety_violation, "safe_fraction": result.safe_fraction}


def _range_hint(spec) -> str:
    """What an operator can do about measurements far outside the GP's prior range."""
    if spec.calibrates:
        return (f"measurement: auto set the GP's scale from the first {spec.n_calibration} "
                "measurements, and this one lies far outside their spread; if such values are "
                "normal for this plant, raise optimizer.measurement.calibration_points so the "
                "scale sees them (a new plant state), or set offset/scale by hand "
                "(docs/configuration.md, Measurement scaling). Shown once per regime")
    return ("set optimizer.measurement offset/scale (or auto) so measurements land within a few "
            "prior standard deviations; otherwise the trigger fires spuriously. Shown once per "
            "regime")


def _window_fields(result) -> dict[str, Any]:
    """The robust trigger's fields of `measurement` and `reset` events (docs/events.md): which test
    fired, the window test's most significant window and its statistic against its threshold,
    whether a reset was held back, and (when so) whether for an uninformed residual. Empty for
    the paper's trigger."""
    if result.window == 0 and not result.held:  # the paper's trigger, or no window yet
        return {"test": result.test} if result.test else {}
    return {"test": result.test, "window": result.window, "window_psi": result.window_psi,
            "window_threshold": result.window_threshold, "held": result.held,
            **({"uninformed": True} if result.uninformed else {})}
