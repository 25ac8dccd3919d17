"""The defaults that changed between releases, spelled out in the optimizer mapping a plant
stores with its state, so that a stored mapping says which behaviour wrote its history and old
state replays exactly (docs/configuration.md: `trigger`, the MAP refit's `objective` and
`refit_tolerance`, `budget.tolerance`)."""

from __future__ import annotations

from collections.abc import Mapping

from .optimize import LEGACY_TOLERANCE, TOLERANCE, Budget
from .spec import HyperSpec, uses_event_trigger

_HYPER = HyperSpec()

#: `hyperparameters` keys whose value a stored mapping spells out (`with_explicit_defaults`):
#: (what a stored mapping without the key means, today's default).
_HYPER_HISTORY = {"objective": ("explicit-inverse", _HYPER.objective),
                  "refit_tolerance": (0.0, _HYPER.refit_tolerance)}


def with_explicit_defaults(m: Mapping, stored: bool = False) -> dict:
    """A copy of an `optimizer:` mapping with the defaults that changed between releases spelled
    out, so a stored mapping says which behaviour wrote its history: the trigger (`trigger:
    robust`, the default), MAP hyperparameters' `objective` and `refit_tolerance`, and a box
    domain's `budget.tolerance`. A `stored` mapping (read back from a plant's state) without
    `trigger` was written by tvbod 0.1.0, whose ET-GP-UCB was the paper's; one without the two
    hyperparameter keys by tvbod <= 0.2 (`explicit-inverse`, no skip); one without
    `budget.tolerance` before the key existed (each polish's own rule, `LEGACY_TOLERANCE`)."""
    out = dict(m)
    if uses_event_trigger(m) and "trigger" not in m:
        out["trigger"] = "paper" if stored else "robust"
    hyper = m.get("hyperparameters")
    if isinstance(hyper, Mapping) and hyper.get("lengthscales") == "map":
        out["hyperparameters"] = dict(hyper)
        for key, (old, default) in _HYPER_HISTORY.items():
            out["hyperparameters"].setdefault(key, old if stored else default)
    domain, budget = m.get("domain"), m.get("budget", {})
    if (isinstance(domain, Mapping) and domain.get("type", "box") == "box"
            and isinstance(budget, Mapping) and "tolerance" not in budget):
        legacy = LEGACY_TOLERANCE.get(budget.get("polish", Budget.polish), TOLERANCE)
        out["budget"] = {**budget, "tolerance": legacy if stored else TOLERANCE}
    return out
