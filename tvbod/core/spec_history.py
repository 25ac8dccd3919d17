"""The defaults that changed between releases, spelled out in the optimizer mapping a plant
stores with its state, so that a stored mapping says which behaviour wrote its history and old
state replays exactly (docs/configuration.md: `trigger` and `trigger.uninformed`, the MAP
refit's `objective`, `refit_tolerance` and `refit_stop`, `measurement.pessimism`,
`budget.tolerance`)."""

from __future__ import annotations

from collections.abc import Mapping

from .optimize import LEGACY_TOLERANCE, TOLERANCE, Budget
from .spec import (HyperSpec, OptimizerSpec, TriggerSpec, default_noise_variance,
                   uses_event_trigger)

_HYPER = HyperSpec()

#: `hyperparameters` keys whose value a stored mapping spells out (`with_explicit_defaults`):
#: (what a stored mapping without the key means, today's default).
_HYPER_HISTORY = {"objective": ("explicit-inverse", _HYPER.objective),
                  "refit_tolerance": (0.0, _HYPER.refit_tolerance),
                  "refit_stop": ("scipy", _HYPER.refit_stop)}


def with_explicit_defaults(m: Mapping, stored: bool = False) -> dict:
    """A copy of an `optimizer:` mapping with the defaults that changed between releases spelled
    out, so a stored mapping says which behaviour wrote its history: the trigger (`trigger:
    robust`, the default, as a mapping with its `uninformed` rule and `backoff`), MAP
    hyperparameters' `objective`, `refit_tolerance` and `refit_stop`, the measurement map's
    offset and scale (and an auto offset's `pessimism`), and a box domain's `budget.tolerance`.
    A `stored` mapping
    (read back from a plant's state) without `trigger` was written by tvbod 0.1.0, whose
    ET-GP-UCB was the paper's; a robust trigger without `uninformed` before the rule existed
    (`off`), without `uninformed_from` / `backoff` before those existed (`min_points`, 1); one
    without a measurement offset / scale when `0` / `1` was the default, without
    `noise_variance` when 0.02 was (today: `auto` with an auto measurement map), an auto offset
without `relevel` before it existed (false); an auto offset without
    `pessimism` before it existed (0: the plain mean); one without the two
    hyperparameter keys by tvbod <= 0.2 (`explicit-inverse`, no skip); one without `refit_stop`
    before the key existed (`scipy`: L-BFGS-B's default stopping test); one without
    `budget.tolerance` before the key existed (each polish's own rule, `LEGACY_TOLERANCE`)."""
    out = dict(m)
    if uses_event_trigger(m):
        out["trigger"] = _trigger(m.get("trigger", "paper" if stored else "robust"), stored)
    hyper = m.get("hyperparameters")
    if isinstance(hyper, Mapping) and hyper.get("lengthscales") == "map":
        out["hyperparameters"] = dict(hyper)
        for key, (old, default) in _HYPER_HISTORY.items():
            out["hyperparameters"].setdefault(key, old if stored else default)
    out["measurement"] = _measurement(m.get("measurement", {}), stored)
    if "noise_variance" not in m:
        out["noise_variance"] = OptimizerSpec.noise_variance if stored else _noise_default(out)
    domain, budget = m.get("domain"), m.get("budget", {})
    if (isinstance(domain, Mapping) and domain.get("type", "box") == "box"
            and isinstance(budget, Mapping) and "tolerance" not in budget):
        legacy = LEGACY_TOLERANCE.get(budget.get("polish", Budget.polish), TOLERANCE)
        out["budget"] = {**budget, "tolerance": legacy if stored else TOLERANCE}
    return out


#: Robust-trigger keys a stored mapping spells out: (what a stored mapping without the key
#: means, today's default).
_TRIGGER_HISTORY = {"uninformed": ("off", TriggerSpec().uninformed),
                    "uninformed_from": ("min_points", TriggerSpec().uninformed_from),
                    "backoff": (1.0, TriggerSpec().backoff)}


def _noise_default(m: Mapping):
    """Today's `noise_variance` default for the spelled-out mapping `m` (`default_noise_variance`
    of its measurement map and hyperparameters)."""
    meas = m.get("measurement")
    calibrates = isinstance(meas, Mapping) and "auto" in (meas.get("offset"), meas.get("scale"))
    return default_noise_variance(calibrates, m.get("hyperparameters"))


def _measurement(value, stored: bool):
    """The measurement map with its offset and scale spelled out (a stored mapping without them
    was written when the fixed map `0` / `1` was the default; today `auto`) and an auto offset's
    `pessimism` (0 in a stored mapping without it: the plain mean); anything malformed as is."""
    if value == "auto":
        value = {"offset": "auto", "scale": "auto"}
    if not isinstance(value, Mapping):
        return value
    meas = dict(value)
    meas.setdefault("offset", 0.0 if stored else "auto")
    meas.setdefault("scale", 1.0 if stored else "auto")
    if meas["offset"] == "auto":
        meas.setdefault("pessimism", 0.0 if stored else OptimizerSpec.pessimism)
        meas.setdefault("relevel", False if stored else OptimizerSpec.relevel)
    return meas


def _trigger(value, stored: bool):
    """A robust trigger spelled as a mapping with its `uninformed` share, the dataset size from
    which that applies and the refractory period's backoff (`off`, `min_points`, 1 in a stored
    mapping without them); the paper's, or anything malformed (the parser's to report), as is."""
    if value == "robust":
        value = {"type": "robust"}
    if not isinstance(value, Mapping) or value.get("type", "robust") != "robust":
        return value
    out = dict(value)
    for key, (old, default) in _TRIGGER_HISTORY.items():
        out.setdefault(key, old if stored else default)
    return out
