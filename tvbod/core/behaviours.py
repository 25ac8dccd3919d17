"""Behaviour versions: the settings of the optimizer that only the version of tvbod decides.

The optimizer mapping a plant stores with its state records the behaviour version that wrote it
(`behaviour`, a small integer; `NEWEST` for a mapping made today). `BEHAVIOURS[v]` is everything
that version implies, so stored state replays as it was written, and a plant file names none of
it. Versions are numbered in the order the behaviour changed (`_CHANGES`): 1 is tvbod 0.1.0, 2
is tvbod 0.2.0, each later one changed a rule. A mapping stored before `behaviour` existed is read
as the version its spelled-out keys tell (`read_stored`).

A version decides two kinds of keys:

- *fixed settings* (`FIXED`): only the version sets them; a mapping that names one is refused
  (`refuse_fixed`);
- *defaults* of keys a user may set (`trigger`, `measurement.offset` and `.scale`,
  `noise_variance`): what a mapping without the key means.

`spelled(m)` writes every entry of `m`'s version that applies to `m` at its key: the form
`parse_spec` reads, and the one a plant's fingerprint hashes (so two mappings that behave alike
have one fingerprint, whatever versions they name).
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import SpecError
from .optimize import TOLERANCE, Budget
from .spec_model import DEFAULT_NOISE_VARIANCE, default_noise_variance
from .spec_sections import uses_event_trigger

#: `budget.tolerance` of behaviour 1-3: each polish's own stopping rule (SciPy's L-BFGS-B
#: `ftol`; the Newton polish's gain `F_TOL`), by `budget.polish`.
LEGACY_TOLERANCE = {"lbfgsb-joint": 2.220446049250313e-09, "newton": 1e-12}
#: `noise_variance` from behaviour 9 on: `default_noise_variance` (`auto` with an auto
#: measurement map, unless the MAP refit learns the noise; else 0.02).
BY_MEASUREMENT_MAP = "by the measurement map"

#: What each version changed, in order; version 1 lists every entry.
_CHANGES: dict[int, dict] = {
    1: {"trigger": "paper", "hyperparameters.objective": "explicit-inverse",
        "hyperparameters.refit_tolerance": 0.0, "hyperparameters.refit_stop": "scipy",
        "budget.tolerance": LEGACY_TOLERANCE, "trigger.uninformed": "off",
        "trigger.uninformed_from": "min_points", "trigger.backoff": 1.0,
        "measurement.offset": 0.0, "measurement.scale": 1.0, "measurement.pessimism": 0.0,
        "measurement.relevel": False, "noise_variance": DEFAULT_NOISE_VARIANCE},
    2: {"trigger": "robust"},  # the robust event trigger
    3: {"hyperparameters.objective": "factored",  # the factored MAP objective, skipped refits
        "hyperparameters.refit_tolerance": 0.05},
    4: {"budget.tolerance": TOLERANCE},  # one relative stopping rule for both polishes
    5: {"trigger.uninformed": 0.5},  # no reset for a residual where D is uninformed
    6: {"measurement.pessimism": 1.0},  # an auto offset one scale to the worse side
    7: {"hyperparameters.refit_stop": "tolerance"},  # a refit stops where the next is skipped
    8: {"trigger.uninformed_from": 1, "trigger.backoff": 2.0,  # the hold from |D| = 1, backoff;
        "measurement.offset": "auto", "measurement.scale": "auto"},  # measurement: auto
    9: {"noise_variance": BY_MEASUREMENT_MAP},  # noise_variance: auto with an auto map
    10: {"measurement.relevel": True},  # the offset follows the new dataset after a reset
}
NEWEST = max(_CHANGES)
#: version -> every entry that behaviour implies (dotted keys of the optimizer mapping).
BEHAVIOURS: dict[int, dict] = {}
for _v in sorted(_CHANGES):
    BEHAVIOURS[_v] = {**BEHAVIOURS.get(_v - 1, {}), **_CHANGES[_v]}
#: The fixed settings: keys only the behaviour version sets.
FIXED = ("hyperparameters.objective", "hyperparameters.refit_tolerance",
         "hyperparameters.refit_stop", "budget.tolerance", "trigger.uninformed",
         "trigger.uninformed_from", "trigger.backoff", "measurement.pessimism",
         "measurement.relevel")
FIXED_PROBLEM = ("is fixed by the behaviour version (docs/configuration.md, Behaviour "
                 "versions): remove it")


def refuse_fixed(m: Mapping) -> None:
    """Raise `SpecError` for the first fixed setting that the mapping `m` names."""
    for key in FIXED:
        section, leaf = key.split(".")
        if isinstance(m.get(section), Mapping) and leaf in m[section]:
            raise SpecError(key, FIXED_PROBLEM)


def user_part(section: str, value):
    """The mapping `value` of a top-level `section` without the fixed settings in it (the part a
    user gives); anything else as is."""
    if not isinstance(value, Mapping):
        return value
    return {k: v for k, v in value.items() if f"{section}.{k}" not in FIXED}


def version_of(m: Mapping) -> int:
    """The behaviour version an optimizer mapping names (`behaviour`; the newest without it: a
    stored mapping without the key goes through `read_stored` first)."""
    v = m.get("behaviour", NEWEST)
    if isinstance(v, bool) or not isinstance(v, int) or v not in BEHAVIOURS:
        raise SpecError("behaviour", f"{v!r} is not a behaviour version", f"1..{NEWEST}")
    return v


def spelled(m: Mapping, settings: Mapping | None = None) -> dict:
    """`m` without `behaviour` and with every entry of its version that applies to it at its key
    (a key `m` gives is kept); `settings` replaces fixed settings of the version (experiments
    that isolate one rule, e.g. the benchmarks' rows of an older refit)."""
    s = dict(BEHAVIOURS[version_of(m)])
    for key, value in (settings or {}).items():
        if key not in FIXED:
            raise ValueError(f"{key!r} is not a fixed setting ({', '.join(FIXED)})")
        s[key] = value
    out = {k: v for k, v in m.items() if k != "behaviour"}
    if uses_event_trigger(m):
        out["trigger"] = _trigger(m.get("trigger", s["trigger"]), s)
    hyper = m.get("hyperparameters")
    if isinstance(hyper, Mapping) and hyper.get("lengthscales") == "map":
        out["hyperparameters"] = _section(hyper, "hyperparameters", s)
    out["measurement"] = _measurement(m.get("measurement", {}), s)
    if "noise_variance" not in m:
        out["noise_variance"] = _noise(out, s["noise_variance"])
    domain, budget = m.get("domain"), m.get("budget", {})
    if (isinstance(domain, Mapping) and domain.get("type", "box") == "box"
            and isinstance(budget, Mapping) and "tolerance" not in budget):
        tol = s["budget.tolerance"]
        if isinstance(tol, Mapping):
            tol = tol.get(budget.get("polish", Budget.polish), TOLERANCE)
        out["budget"] = {**budget, "tolerance": tol}
    return out


def read_stored(m: Mapping) -> dict:
    """A stored optimizer mapping as today's code writes one: with `behaviour` (inferred for a
    mapping stored before the key existed) and without fixed settings. A mapping that sets one
    to a value its version does not have is refused (`SpecError`): no version reproduces it."""
    if not isinstance(m, Mapping) or "behaviour" in m:
        return dict(m) if isinstance(m, Mapping) else m
    out = {**m, "behaviour": _inferred(m)}
    for key in FIXED:
        section, leaf = key.split(".")
        if isinstance(out.get(section), Mapping) and leaf in out[section]:
            out[section] = {k: v for k, v in out[section].items() if k != leaf}
    want, have = _flat(spelled(out)), _flat(spelled({**m, "behaviour": out["behaviour"]}))
    if want != have:
        key = next(k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k))
        raise SpecError(key, f"is {have.get(key)!r} in this stored mapping, which no behaviour "
                        f"version has (version {out['behaviour']}: {want.get(key)!r}); replay it "
                        "with the tvbod that wrote it")
    return out


def _flat(m: Mapping, prefix: str = "") -> dict:
    """Dotted key -> value of the leaves of a nested mapping."""
    out = {}
    for k, v in m.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _inferred(m: Mapping) -> int:
    """The oldest version that writes `m` as it is: each spelled-out key that `m` has sets a
    lower bound (the version that added it), each one that applies and `m` lacks an upper bound;
    `SpecError` when no version fits."""
    lo, hi = 1, NEWEST
    for version, applies, present, added in _markers(m):
        if not applies:
            continue
        if present and added:
            lo = max(lo, version)
        elif not present:
            hi = min(hi, version - 1)
    if lo > hi:
        raise SpecError("behaviour", "this stored mapping's spelled-out keys fit no behaviour "
                        f"version (between {lo} and {hi})")
    return lo


def _markers(m: Mapping) -> list[tuple[int, bool, bool, bool]]:
    """(version, whether its key applies to `m`, whether `m` spells it out, whether the key
    itself came with that version) for every key a version spelled out in stored mappings."""
    event = uses_event_trigger(m)
    trig = m.get("trigger")
    robust = event and "trigger" in m and (trig == "robust" or (
        isinstance(trig, Mapping) and trig.get("type", "robust") == "robust"))
    t = trig if isinstance(trig, Mapping) else {}
    hyper = m.get("hyperparameters")
    fits = isinstance(hyper, Mapping) and hyper.get("lengthscales") == "map"
    h = hyper if fits else {}
    domain, budget = m.get("domain"), m.get("budget", {})
    box = (isinstance(domain, Mapping) and domain.get("type", "box") == "box"
           and isinstance(budget, Mapping))
    meas = m.get("measurement")
    mm = meas if isinstance(meas, Mapping) else {}
    auto_offset = meas == "auto" or mm.get("offset") == "auto"
    return [
        (2, event, "trigger" in m, True),
        (3, fits, "objective" in h or "refit_tolerance" in h, True),
        (4, box, box and "tolerance" in budget, True),
        (5, robust, "uninformed" in t, True),
        (6, auto_offset, "pessimism" in mm, True),
        (7, fits, "refit_stop" in h, True),
        (8, robust, "uninformed_from" in t or "backoff" in t, True),
        (8, True, "offset" in mm and "scale" in mm, False),
        (9, True, "noise_variance" in m, False),
        (10, auto_offset, "relevel" in mm, True),
    ]


def _section(value: Mapping, section: str, s: Mapping) -> dict:
    """`value` (the mapping of `section`) with the version's fixed settings of that section."""
    out = dict(value)
    for key in FIXED:
        head, leaf = key.split(".")
        if head == section:
            out.setdefault(leaf, s[key])
    return out


def _trigger(value, s: Mapping):
    """A robust trigger as a mapping with the version's settings; the paper's, or anything
    malformed (the parser's to report), as is."""
    if value == "robust":
        value = {"type": "robust"}
    if not isinstance(value, Mapping) or value.get("type", "robust") != "robust":
        return value
    return _section(value, "trigger", s)


def _measurement(value, s: Mapping):
    """The measurement map with its offset and scale (the version's defaults) and, for an auto
    offset, the version's settings; anything malformed as is."""
    if value == "auto":
        value = {"offset": "auto", "scale": "auto"}
    if not isinstance(value, Mapping):
        return value
    meas = dict(value)
    meas.setdefault("offset", s["measurement.offset"])
    meas.setdefault("scale", s["measurement.scale"])
    if meas["offset"] == "auto":
        meas = _section(meas, "measurement", s)
    return meas


def _noise(m: Mapping, default):
    """`noise_variance` of the spelled-out mapping `m` when it does not give one."""
    if default != BY_MEASUREMENT_MAP:
        return default
    meas = m.get("measurement")
    calibrates = isinstance(meas, Mapping) and "auto" in (meas.get("offset"), meas.get("scale"))
    return default_noise_variance(calibrates, m.get("hyperparameters"))
