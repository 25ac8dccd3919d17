"""Safe tuning: propose only gains whose measurement is certified to stay on the good side of a
threshold, fall back to a known-safe controller on a reset.

The threshold `h` is given in measurement units (`max_cost` when minimizing, `min_reward` when
maximizing) and read on the GP's internal scale, where larger is better and safe means `f >= h`.

**The safety model** is the objective's GP posterior with two changes (SafeOpt's safe set,
Sui et al. 2015, eq. 2, `S_t = {x : l_t(x) >= h}`):

- its prior mean is the threshold, `mu_s(x) = h + k(x)^T K^{-1} (y - h 1)` (`ExactGP.predict`
  with `prior_mean`): a point is certified only by data near it, never by the prior, so a box
  that holds unmeasured destabilising gains starts out unsafe however the GP is scaled;
- its prior standard deviation is `r sigma_f` with `r = max(1, |h| / sigma_f)`: at least the
  threshold's distance from the objective's prior mean, so a threshold far from the measured
  level does not certify the box within a few lengthscales of one measurement.

`l(x) = mu_s(x) - sigmas r sigma(x)`. If `(f - h) / r` lies in the kernel's RKHS with norm `B`
and the noise is sub-Gaussian, `sigmas = beta_t^{1/2}` of Chowdhury & Gopalan (2017, Thm. 2)
makes every certified point safe with probability `1 - delta` jointly; a fixed `sigmas` (default
2) is the one-point bound (one-sided 2 sigma: 97.7 %), as SafeOpt's experiments use.

**Proposals** (a documented simpler rule than SafeOpt's expander/maximiser split): the
strategy's own acquisition (GP-UCB's UCB, TV-GP-UCB's, UI-TVBO's, ET-GP-UCB's) maximized over
the certified set, within `max_step` of the last evaluated point; the seeds (`safe_seeds`) and
the backup are always admitted. UCB's weight on sigma drives the proposal to the safe set's
boundary, where it expands. Nothing certified in reach: the best certified point of D in reach,
else a step (at most `max_step`) toward the nearest seed.

**A reset** (ETSO, Holzapfel et al. 2024) first picks the backup controller: the certified point
of the old D with the highest posterior mean, else the nearest seed. The next proposal is the
backup (exempt from `max_step`: it is known safe), and the safe set of the new regime grows from
the data measured after the change.

**Violations and failures.** A measurement beyond the threshold is a violation; what the GP sees
of it is capped at `h - r sigma_f` (one safety-prior sd past the threshold), so one catastrophic
episode neither rescales the GP nor wrecks its fit. A failed experiment (`failed: true`) is told
at that cap: the point and its neighbourhood leave the safe set. Capped values do not calibrate
the measurement map (`measurement: auto`): a failure carries no information on the scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import validate
from .errors import SpecError, StateError
from .optimize import maximize_on_box

#: Full-domain Sobol points on which the safe set's size (`safe_fraction`) is measured.
FRACTION_POINTS = 256
_KEYS = {"max_cost", "min_reward", "safe_seeds", "max_step", "sigmas"}


@dataclass(frozen=True)
class SafetySpec:
    """`optimizer.safety`: the `threshold` in measurement units (`max_cost` or `min_reward`),
    the `seeds` known to be safe (physical units), the largest change per step and parameter
    `max_step` (physical units; None: no limit) and the bound's width `sigmas`."""

    threshold: float
    seeds: tuple[tuple[float, ...], ...]
    max_step: tuple[float, ...] | None = None
    sigmas: float = 2.0


def parse_safety(value, sense: str, domain, strategy: str) -> SafetySpec:
    """Validate `safety:` against the sense, the (box) domain `DomainSpec` and the strategy."""
    m = validate.mapping(value, "safety")
    validate.check_keys(m, _KEYS, "safety.")
    if strategy == "random-search":
        raise SpecError("safety", "needs a GP strategy, not 'random-search'")
    if domain.type != "box":
        raise SpecError("safety", f"needs a box domain, not {domain.type!r}")
    key = "max_cost" if sense == "minimize" else "min_reward"
    other = "min_reward" if key == "max_cost" else "max_cost"
    if other in m:
        raise SpecError(f"safety.{other}", f"does not apply with sense {sense}", f"safety.{key}")
    if key not in m:
        raise SpecError(f"safety.{key}", f"is required (sense {sense})")
    lower, upper = np.asarray(domain.lower), np.asarray(domain.upper)
    seeds = _seeds(m.get("safe_seeds"), lower, upper)
    step = m.get("max_step")
    if step is not None:
        step = validate.vector(step, "safety.max_step", len(lower))
        for i, s in enumerate(step):
            validate.number(s, f"safety.max_step[{i}]", 0.0, float(upper[i] - lower[i]),
                            lo_open=True)
    return SafetySpec(
        threshold=validate.number(m[key], f"safety.{key}"),
        seeds=seeds, max_step=step,
        sigmas=validate.number(m.get("sigmas", SafetySpec.sigmas), "safety.sigmas", 0.0, 10.0,
                               lo_open=True))


def _seeds(value, lower: np.ndarray, upper: np.ndarray) -> tuple[tuple[float, ...], ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError("safety.safe_seeds", "is required: a list of gain vectors known to be safe "
                        "(e.g. the controller running today)", f"[[{len(lower)} numbers], ...]")
    out = []
    for i, seed in enumerate(value):
        v = validate.vector(seed, f"safety.safe_seeds[{i}]", len(lower))
        if not all(lo <= s <= hi for s, lo, hi in zip(v, lower, upper)):
            raise SpecError(f"safety.safe_seeds[{i}]", f"{list(v)} is outside the box",
                            f"within [{lower.tolist()}, {upper.tolist()}]")
        out.append(v)
    return tuple(out)


class SafeSet:
    """The safe set of one strategy and what it remembers: the last evaluated point (`reference`,
    internal), the pending `backup` after a reset, and the counts of violations and failures."""

    def __init__(self, spec: SafetySpec, domain) -> None:
        self.spec = spec
        self.seeds = np.array([domain.to_internal(np.asarray(s)) for s in spec.seeds])
        self.step = None if spec.max_step is None else np.asarray(spec.max_step) / domain.scale
        self.reference: np.ndarray | None = None
        self.backup: np.ndarray | None = None
        self.violations = 0
        self.failures = 0

    # ------------------------------------------------------------------ the model
    def level(self, output, sf: float) -> tuple[float, float]:
        """`(h, r)`: the threshold on the GP's scale and the safety prior's sd in units of
        `sigma_f = sf` (module docstring)."""
        h = float(output.to_internal(self.spec.threshold))
        return h, max(1.0, abs(h) / sf)

    def lower_bound(self, gp, Z: np.ndarray, t: int, output, sf: float) -> np.ndarray:
        """`l(x) = mu_s(x) - sigmas r sigma(x)` at the rows of `Z` (internal coordinates)."""
        h, r = self.level(output, sf)
        mean, var = gp.predict(np.atleast_2d(Z), float(t), prior_mean=h)
        return mean - self.spec.sigmas * r * np.sqrt(var)

    def certified(self, gp, Z: np.ndarray, t: int, output, sf: float) -> np.ndarray:
        """Mask of the rows of `Z` in `S_t = {x : l(x) >= h}`."""
        h, _ = self.level(output, sf)
        return self.lower_bound(gp, Z, t, output, sf) >= h

    def admitted(self, gp, Z: np.ndarray, t: int, output, sf: float) -> np.ndarray:
        """Certified, or a seed or the backup (always admitted)."""
        anchors = self.seeds if self.backup is None else np.vstack([self.seeds, self.backup])
        is_anchor = (np.asarray(Z)[:, None, :] == anchors[None, :, :]).all(-1).any(-1)
        return is_anchor | self.certified(gp, Z, t, output, sf)

    def safe_fraction(self, gp, t: int, output, sf: float, domain, unit: np.ndarray) -> float:
        """The share of the domain in `S_t`, on its first `FRACTION_POINTS` Sobol points."""
        Z = domain.z_lower + unit[:FRACTION_POINTS] * (domain.z_upper - domain.z_lower)
        return float(np.mean(self.certified(gp, Z, t, output, sf))) if gp.n else 0.0

    def cap(self, yi: float, failed: bool, output, sf: float) -> tuple[float, bool]:
        """`(value the GP sees, violation)` for internal measurement `yi`: capped at
        `h - r sigma_f`; a failure is told at the cap and is a violation."""
        h, r = self.level(output, sf)
        floor = h - r * sf
        if failed:
            return floor, True
        return max(yi, floor), yi < h

    def before_tell(self, gp, t: int, failed: bool, violation: bool, resets: bool, output,
                    sf: float) -> np.ndarray | None:
        """Count a tell's violation and failure and, if it resets, choose the backup from D
        before the reset drops it (`choose_backup`); the backup, else None."""
        self.violations += bool(violation)
        self.failures += bool(failed)
        self.backup = None
        if not resets:
            return None
        return self.choose_backup(gp, t, output, sf,
                                  gp.data_mean(float(t)) if gp.n else None)

    def after_tell(self, z: np.ndarray, reset: bool, backup) -> np.ndarray | None:
        """The told point `z` becomes the step box's reference; a reset arms the backup."""
        self.reference = z.copy()
        self.backup = backup if reset else None
        return self.backup

    # ------------------------------------------------------------------ the points
    def step_box(self, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box within `max_step` of the reference point, inside `[lower, upper]`."""
        if self.step is None or self.reference is None:
            return lower, upper
        return (np.maximum(lower, self.reference - self.step),
                np.minimum(upper, self.reference + self.step))

    def forced(self) -> np.ndarray | None:
        """The point the next ask must propose: the backup after a reset, else None."""
        return None if self.backup is None else self.backup.copy()

    def nearest_seed(self) -> np.ndarray:
        if self.reference is None:
            return self.seeds[0].copy()
        return self.seeds[int(np.argmin(((self.seeds - self.reference) ** 2).sum(-1)))].copy()

    def propose(self, gp, t: int, acq, output, sf: float, domain, unit, shift, budget
                ) -> np.ndarray:
        """The next proposal (internal): the backup right after a reset, the nearest seed on an
        empty D, else `acq`'s maximum over the admitted set within the step box
        (`optimize.maximize_on_box` with `feasible`), else the `fallback`."""
        forced = self.forced()
        if forced is not None:
            return forced
        if gp.n == 0:
            return self.nearest_seed()
        lower, upper = self.step_box(domain.z_lower, domain.z_upper)
        found = maximize_on_box(gp, float(t), acq, lower, upper, unit, shift, budget,
                                extra=np.vstack([gp.X_, self.seeds]),
                                feasible=lambda Z: self.admitted(gp, Z, t, output, sf))
        if found is not None:
            return found[0]
        return self.fallback(gp, t, output, sf, lower, upper, gp.data_mean(float(t)))

    def fallback(self, gp, t: int, output, sf: float, lower, upper, data_mean) -> np.ndarray:
        """Nothing certified in reach: the best certified point of D in the step box, else a step
        of at most `max_step` toward the nearest seed."""
        if gp.n:
            inside = np.all((gp.X_ >= lower) & (gp.X_ <= upper), axis=1)
            ok = inside & self.certified(gp, gp.X_, t, output, sf)
            if ok.any():
                i = int(np.flatnonzero(ok)[np.argmax(data_mean[ok])])
                return gp.X_[i].copy()
        seed = self.nearest_seed()
        return np.clip(seed, lower, upper) if self.reference is not None else seed

    def choose_backup(self, gp, t: int, output, sf: float, data_mean) -> np.ndarray:
        """The backup for a reset at step `t`, from the old D (before it is dropped)."""
        if gp.n:
            ok = self.certified(gp, gp.X_, t, output, sf)
            if ok.any():
                return gp.X_[int(np.flatnonzero(ok)[np.argmax(data_mean[ok])])].copy()
        return self.nearest_seed()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"reference": None if self.reference is None else self.reference.tolist(),
                "backup": None if self.backup is None else self.backup.tolist(),
                "violations": self.violations, "failures": self.failures}

    def load_state_dict(self, state: dict) -> None:
        d = len(self.seeds[0])

        def point(v):
            if v is None:
                return None
            z = np.asarray(v, dtype=float).reshape(-1)
            if z.shape != (d,) or not np.all(np.isfinite(z)):
                raise StateError(f"safety state point {v!r} is not {d} finite numbers")
            return z

        counts = (int(state["violations"]), int(state["failures"]))
        if min(counts) < 0 or counts[1] > counts[0]:
            raise StateError(f"safety state counts {counts!r} are inconsistent")
        self.reference, self.backup = point(state["reference"]), point(state["backup"])
        self.violations, self.failures = counts


def sigma_f(variance: float) -> float:
    """`sigma_f` from the signal variance in force."""
    return math.sqrt(float(variance))
