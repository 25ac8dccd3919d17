"""The map from measurement units to the GP's scale, fixed or calibrated (`measurement: auto`).

The GP prior, `beta_t` and the trigger's thresholds (`sqrt(rho_t') sigma + wbar_t'`) all assume
a unit prior variance and a noise variance `sigma_n^2` on the GP's scale, so a fixed map
`internal = sign (y - offset) / scale` makes the optimizer's behaviour depend on the plant's
units: the same plant measured in other units is a different problem. `auto` removes the
dependence: the scale `s` is the standard deviation of the first `n0` measurements
(`calibration_points`, default `max(20, 2d + 2)`) and the offset their mean moved `pessimism`
scales to the worse side, `offset = mean - sign k s` (the GP's prior mean: unexplored points are
expected somewhat worse than the first, clustered, measurements, which keeps UCB from chasing
every unexplored corner; docs/configuration.md); until then the estimates are updated at
every tell and the GP's targets are re-expressed in them. Multiplying every measurement by
`x > 0` and adding `c` leaves the internal values unchanged (bit for bit when `x` is a power of
two and `c = 0`), so trajectories, resets and regret do not depend on the units.

While calibrating the scale is not yet known, so the event trigger's decision is reported but not
acted on (a residual cannot be judged against `wbar_t'` in unknown units). After `n0`
measurements the map is frozen for good, across resets: a reset forgets data, not units, and a
jump must show up as a large standardized residual, which re-standardizing on post-jump data would
hide. Scikit-learn's `normalize_y` and BoTorch's `Standardize` re-estimate on every fit instead;
that is fine for a static objective and wrong for a drift detector.

Why the mean and standard deviation of `max(20, 2d + 2)` measurements, and not fewer points or
the range: docs/configuration.md, *Measurement scaling*.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import DomainError, StateError


class OutputMap:
    """`internal = sign (y - offset) / scale`; `offset=None` / `scale=None` means calibrated, an
    auto offset `pessimism` scales to the worse side of the level it is set from.

    `observe(y)` records a measurement while calibrating and returns True when the map changed
    (the caller re-expresses the GP's targets with `reexpress`).
    """

    def __init__(self, offset: float | None, scale: float | None, sign: float, n0: int,
                 pessimism: float = 0.0) -> None:
        self.fixed_offset, self.fixed_scale = offset, scale
        self.sign, self.n0, self.pessimism = float(sign), int(n0), float(pessimism)
        self.raw_: list[float] = []  # the calibration measurements (measurement units)
        self.offset_ = 0.0 if offset is None else float(offset)
        self.scale_ = 1.0 if scale is None else float(scale)

    @property
    def calibrating(self) -> bool:
        """True until `n0` measurements have fixed the auto offset/scale (False when fixed)."""
        auto = self.fixed_offset is None or self.fixed_scale is None
        return auto and len(self.raw_) < self.n0

    @property
    def has_scale(self) -> bool:
        """False while an auto scale has seen fewer than two measurements (no scale to judge by)."""
        return self.fixed_scale is not None or len(self.raw_) >= 2

    def to_internal(self, y: float) -> float:
        return self.sign * (float(y) - self.offset_) / self.scale_

    def to_measurement(self, v: np.ndarray | float):
        """Internal value(s) back to measurement units."""
        return self.sign * np.asarray(v) * self.scale_ + self.offset_

    def observe(self, y: float) -> bool:
        """Record `y` while calibrating; True if the offset or scale moved. Raises `DomainError`
        (nothing recorded) for a `y` the map cannot take (`check`)."""
        if not self.calibrating:
            return False
        self.check(y)
        self.raw_.append(float(y))
        old = (self.offset_, self.scale_)
        self.offset_, self.scale_ = self._estimates(self.raw_)
        return (self.offset_, self.scale_) != old

    def check(self, y: float) -> None:
        """`DomainError` unless `y` maps to a finite internal value, and (while calibrating) the
        offset/scale estimated with `y` stay finite: one absurd measurement must not turn the map,
        and every later measurement with it, into inf or NaN. Changes nothing."""
        with np.errstate(all="ignore"):
            ok = math.isfinite(float(y)) and math.isfinite(self.to_internal(y))
            if ok and self.calibrating:
                offset, scale = self._estimates([*self.raw_, float(y)])
                ok = math.isfinite(offset) and math.isfinite(scale) and scale > 0
        if not ok:
            raise DomainError(f"measurement {y!r} would make the measurement map's offset/scale "
                              "or the GP's target non-finite")

    def _estimates(self, raw_list: list[float]) -> tuple[float, float]:
        """`(offset, scale)` from the calibration measurements `raw_list`: the mean (moved by
        `pessimism` scales) and the standard deviation, where they are auto."""
        raw = np.asarray(raw_list)
        offset, scale = self.offset_, self.scale_
        if self.fixed_scale is None and raw.size >= 2:
            sd = float(raw.std())
            # identical measurements carry no scale: keep the previous one
            if sd > 1e-12 * max(1.0, float(np.abs(raw).max())):
                scale = sd
        if self.fixed_offset is None:
            has_scale = self.fixed_scale is not None or raw.size >= 2
            margin = self.sign * self.pessimism * scale if has_scale else 0.0
            offset = float(raw.mean()) - margin
        return offset, scale

    def _margin(self) -> float:
        """`sign * pessimism * scale`: how far the auto offset lies on the worse side of the
        level it is set from (0 while an auto scale has no two measurements yet)."""
        return self.sign * self.pessimism * self.scale_ if self.has_scale else 0.0

    def recentre(self, measured) -> bool:
        """After a reset, an auto offset moves to the mean of `measured`, the new dataset's
        measurements (`pessimism` scales to its worse side): at the reset D = {(x_t, y_t)}, the
        only evidence of the objective's level after a change (a prior mean left at the old level
        makes every point far from `x_t` look like another change); with `relevel`, D's next few
        measurements too, while the refractory period keeps the trigger from correcting a level
        set by one noisy measurement. True if the offset moved (a calibrated, auto offset only)."""
        values = np.atleast_1d(np.asarray(measured, dtype=float))
        if self.fixed_offset is not None or self.calibrating or values.size == 0:
            return False
        offset = float(np.mean(values)) - self._margin()
        moved, self.offset_ = offset != self.offset_, offset
        return moved

    def reexpress(self, internal: np.ndarray, old_offset: float, old_scale: float) -> np.ndarray:
        """Internal targets written under `(old_offset, old_scale)`, in the current map."""
        measured = self.sign * np.asarray(internal, dtype=float) * old_scale + old_offset
        return self.sign * (measured - self.offset_) / self.scale_

    def state_dict(self) -> dict:
        return {"raw": list(self.raw_), "offset": self.offset_, "scale": self.scale_}

    def load_state_dict(self, state: dict) -> None:
        raw = [float(v) for v in state["raw"]]
        offset, scale = float(state["offset"]), float(state["scale"])
        if not (all(math.isfinite(v) for v in raw) and math.isfinite(offset)
                and math.isfinite(scale) and scale > 0 and len(raw) <= self.n0):
            raise StateError(f"calibration state {state!r} is not finite/positive or too long")
        self.raw_, self.offset_, self.scale_ = raw, offset, scale
