"""The defaults that changed between releases, spelled out in the optimizer mapping a plant
stores with its state, so that a stored mapping says which behaviour wrote its history and old
state replays exactly (docs/configuration.md: `trigger` and `trigger.uninformed`, the MAP
refit's `objective`, `refit_tolerance` and `refit_stop`, `measurement.pessimism`,
`budget.tolerance`)."""

from __future__ import annotations

from collections.abc import Mapping

from .optimize import LEGACY_TOLERANCE, TOLERANCE, Budget
from .spec import HyperSpec, OptimizerSpec, TriggerSpec, uses_event_trigger

_HYPER = HyperSpec()

#: `hyperparameters` keys whose value a stored mapping spells out (`with_explicit_defaults`):
#: (what a stored mapping without the key means, today's default).
_HYPER_HISTORY = {"objective": ("explicit-inverse", _HYPER.objective),
                  "refit_tolerance": (0.0, _HYPER.refit_tolerance),
                  "refit_stop": ("scipy", _HYPER.refit_stop)}


def with_explicit_defaults(m: Mapping, stored: bool = False) -> dict:
    """A copy of an `optimizer:` mapping with the defaults that changed between releases spelled
    out, so a stored mapping says which behaviour wrote its history: the trigger (`trigger:
    robust`, the default, as a mapping with its `uninformed` share), MAP hyperparameters'
    `objective`, `refit_tolerance` and `refit_stop`, an auto offset's `measurement.pessimism`,
    and a box domain's `budget.tolerance`. A `stored` mapping
    (read back from a plant's state) without `trigger` was written by tvbod 0.1.0, whose
    ET-GP-UCB was the paper's; a robust trigger without `uninformed` before the rule existed
    (`off`); an auto offset without `pessimism` before it existed (0: the plain mean); one
    without the two
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
    meas = m.get("measurement")
    if meas == "auto" or (isinstance(meas, Mapping) and meas.get("offset") == "auto"):
        meas = {"offset": "auto", "scale": "auto"} if meas == "auto" else dict(meas)
        meas.setdefault("pessimism", 0.0 if stored else OptimizerSpec.pessimism)
        out["measurement"] = meas
    domain, budget = m.get("domain"), m.get("budget", {})
    if (isinstance(domain, Mapping) and domain.get("type", "box") == "box"
            and isinstance(budget, Mapping) and "tolerance" not in budget):
        legacy = LEGACY_TOLERANCE.get(budget.get("polish", Budget.polish), TOLERANCE)
        out["budget"] = {**budget, "tolerance": legacy if stored else TOLERANCE}
    return out


def _trigger(value, stored: bool):
    """A robust trigger spelled as a mapping with its `uninformed` share (`off` in a stored
    mapping without it); the paper's, or anything malformed (the parser's to report), as is."""
    if value == "robust":
        value = {"type": "robust"}
    if not isinstance(value, Mapping) or value.get("type", "robust") != "robust":
        return value
    return {**value, "uninformed": value.get("uninformed", "off" if stored
                                             else TriggerSpec().uninformed)}
