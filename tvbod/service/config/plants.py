"""Plant files: parameters, sense, failure policy and the core's `optimizer:` mapping (checked by
`tvbod.core.parse_spec`), validated into a frozen `PlantConfig` with its fingerprint."""

from __future__ import annotations


import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tvbod.core.behaviours import NEWEST, spelled, user_part
from tvbod.core.errors import DomainError, SpecError
from tvbod.core.spec import MAX_FINITE_POINTS, OptimizerSpec, parse_spec
from tvbod.core.validate import InvalidValue, check_keys as _check_keys, choice as _choice
from tvbod.core.validate import integer as _integer, mapping as _mapping, number as _number
from tvbod.protocol import PLANT_NAME_PATTERN, is_valid_plant_name
from tvbod.service.config.common import in_file, plain, read_yaml
from tvbod.service.config.side_files import empirical_kernel, read_matrix_file

_PLANT_KEYS = {
    "name", "description", "parameters", "sense", "optimizer", "proposal_timeout", "failure",
    "safety",
    "max_measurement_sigmas", "max_measurement_abs",
}
#: Default of `max_measurement_sigmas`: measurements farther from the offset (GP scale, in prior
#: standard deviations) are refused with `bad_field`.
DEFAULT_MAX_MEASUREMENT_SIGMAS = 1e6
#: Default of `max_measurement_abs`: the largest |measurement| accepted, in measurement units. It
#: needs no scale, so it guards the first measurements of a calibrating plant too. Its upper limit
#: keeps every square and sum of the calibration finite in float64.
DEFAULT_MAX_MEASUREMENT_ABS = 1e12
MAX_MEASUREMENT_ABS_LIMIT = 1e150


@dataclass(frozen=True)
class ParameterConfig:
    """One tuned parameter: continuous (`lower`, `upper`, optional `unit`, `scaling`) or an arm
    choice `0..arms-1` (then `lower`, `upper`, `unit`, `scaling` are None)."""

    name: str
    lower: float | None = None
    upper: float | None = None
    unit: str | None = None
    scaling: float | None = None
    arms: int | None = None


@dataclass(frozen=True)
class FailurePolicy:
    """What a failed experiment (`tell` with `failed: true`) is recorded as: a fixed `penalty`
    `value`, or `mean_plus_sigma`: the posterior mean `sigmas` standard deviations towards worse."""

    kind: str  # penalty | mean_plus_sigma
    value: float | None = None
    sigmas: float | None = None

    def measurement(self, mean: float, std: float, sense: str) -> float:
        """The measurement to tell for a failure at a point with posterior `mean`, `std`
        (measurement units): `value`, or `mean + k std` (minimize) / `mean - k std` (maximize)."""
        if self.kind == "penalty":
            return float(self.value)
        worse = 1.0 if sense == "minimize" else -1.0
        return float(mean) + worse * float(self.sigmas) * float(std)


@dataclass(frozen=True)
class PlantConfig:
    """One plant file, validated. `optimizer_mapping` is the plain mapping given to `parse_spec`
    (stored by the daemon for replay); `fingerprint` is the sha256 of it and the parameters."""

    name: str
    path: Path
    description: str
    parameters: tuple[ParameterConfig, ...]
    sense: str
    proposal_timeout: float
    failure: FailurePolicy
    optimizer: OptimizerSpec
    optimizer_mapping: dict = field(hash=False, repr=False)
    fingerprint: str
    max_measurement_sigmas: float = DEFAULT_MAX_MEASUREMENT_SIGMAS
    max_measurement_abs: float = DEFAULT_MAX_MEASUREMENT_ABS
    #: `optimizer:` keys of `INHERITED` the file leaves out: a plant with a history keeps the
    #: value it was stored with (`inherit`), a new plant gets today's default.
    defaulted: frozenset = frozenset()

    @property
    def is_arms(self) -> bool:
        return self.parameters[0].arms is not None

    def gains(self, x: np.ndarray) -> dict[str, float | int]:
        """Physical point `(d,)` (what `ask` returns) -> `{name: value}`; an arm index is an int."""
        a = np.asarray(x).reshape(-1)
        if a.shape != (len(self.parameters),) or not np.all(np.isfinite(a.astype(float))):
            raise DomainError(f"point must be {len(self.parameters)} finite numbers, got {x!r}")
        if self.is_arms:
            return {self.parameters[0].name: _arm_index(a[0], self.parameters[0].name)}
        return {p.name: float(v) for p, v in zip(self.parameters, a)}

    def point(self, gains: Mapping[str, Any]) -> np.ndarray:
        """`{name: value}` -> the physical point: float `(d,)`, or the arm index as int `(1,)`.

        Checks names, types and finiteness; bounds are checked by the strategy's domain."""
        names = [p.name for p in self.parameters]
        missing = [n for n in names if n not in gains]
        unknown = sorted(str(k) for k in gains if k not in names)
        if missing or unknown:
            raise DomainError(
                f"gains must name exactly {names}; missing {missing}, unknown {unknown}")
        values = []
        for n in names:
            v = gains[n]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(float(v)):
                raise DomainError(f"gain {n!r} must be a finite number, got {v!r}")
            values.append(v)
        if self.is_arms:
            return np.array([_arm_index(values[0], names[0])], dtype=np.int64)
        return np.array(values, dtype=float)


def _arm_index(v, name: str) -> int:
    if not float(v).is_integer():
        raise DomainError(f"arm {name!r} must be an integer index, got {v!r}")
    return int(v)


# ---------------------------------------------------------------------- plant files
def load_plant_config(path: Path | str) -> PlantConfig:
    """Read and validate one plant file (see docs/configuration.md)."""
    path = Path(path)
    data = read_yaml(path)
    with in_file(path):
        return _plant(data, path)


def _plant(m: Mapping, path: Path) -> PlantConfig:
    _check_keys(m, _PLANT_KEYS)
    if "name" not in m:
        raise InvalidValue("name", "is required")
    name = m["name"]
    if not is_valid_plant_name(name):
        raise InvalidValue("name", f"{name!r} is not a valid plant name", PLANT_NAME_PATTERN)
    description = m.get("description", "")
    if not isinstance(description, str):
        raise InvalidValue("description", f"must be a string, got {description!r}")
    parameters = _parameters(m.get("parameters"))
    if "sense" not in m:
        raise InvalidValue("sense", "is required: is the measurement a cost or a reward?",
                       "minimize (a cost), maximize (a reward)")
    sense = _choice(m["sense"], "sense", ("minimize", "maximize"))
    given = m.get("optimizer", {})
    defaulted = frozenset(k for k in INHERITED if isinstance(given, Mapping) and k not in given)
    mapping, side_files = _optimizer_mapping(given, parameters, sense, path.parent)
    if m.get("safety") is not None:
        if "failure" in m:
            raise InvalidValue("failure", "does not apply with safety: a failed experiment is "
                               "recorded at the safety cap (docs/configuration.md, Safe tuning)")
        mapping["safety"] = _safety_mapping(m["safety"], parameters)
    try:
        mapping, spec = _parsed(mapping)
    except SpecError as e:
        problem = f"{side_files[e.key]} {e.problem}" if e.key in side_files else e.problem
        raise InvalidValue(_plant_key(e.key), problem, e.allowed) from None
    return PlantConfig(
        name=name, path=path.resolve(), description=description, parameters=parameters,
        sense=sense,
        proposal_timeout=_number(m.get("proposal_timeout", 300), "proposal_timeout", 0.0,
                                 lo_open=True),
        failure=_failure(m.get("failure", {"policy": "mean_plus_sigma"})),
        optimizer=spec, optimizer_mapping=mapping, fingerprint=fingerprint(mapping, parameters),
        max_measurement_sigmas=_number(m.get("max_measurement_sigmas",
                                             DEFAULT_MAX_MEASUREMENT_SIGMAS),
                                       "max_measurement_sigmas", 1.0, 1e300),
        max_measurement_abs=_number(m.get("max_measurement_abs", DEFAULT_MAX_MEASUREMENT_ABS),
                                    "max_measurement_abs", 0.0, MAX_MEASUREMENT_ABS_LIMIT,
                                    lo_open=True),
        defaulted=defaulted,
    )


#: Optimizer keys whose value a plant's data depend on and whose default for a stored mapping
#: differs from a new plant's: the measurement map (the stored targets are on its scale).
INHERITED = ("measurement",)


def inherit(config: PlantConfig, stored: Mapping) -> PlantConfig:
    """`config` with each `INHERITED` key its file leaves out taken from `stored`, the optimizer
    mapping of the plant's existing history (`behaviours.read_stored`): a file without
    `measurement` means `auto` for a new plant and, for a plant with data, the map the data were
    written under (a changed default is no change of the plant). The settings its behaviour
    version fixes are `config`'s. `config` itself when nothing differs."""
    have, had = spelled(config.optimizer_mapping), spelled(stored)
    taken = {k: user_part(k, had[k]) for k in config.defaulted if k in had}
    taken = {k: v for k, v in taken.items() if v != user_part(k, have.get(k))}
    if not taken:
        return config
    mapping, spec = _parsed({**config.optimizer_mapping, **taken})
    return replace(config, optimizer=spec, optimizer_mapping=mapping,
                   fingerprint=fingerprint(mapping, config.parameters))


#: Recently parsed optimizer mappings, by their exact JSON text -> (mapping, spec). Plant files
#: with the same optimizer mapping (100 sensors sharing one kernel file) then hold one mapping and
#: one frozen spec between them, not a copy each: a 50-arm kernel matrix is ~80 KB of Python
#: floats per copy, twice (the mapping's lists, the spec's tuples). Neither is ever mutated.
_PARSED: dict[str, tuple[dict, OptimizerSpec]] = {}
_PARSED_KEPT = 256


def _parsed(mapping: dict) -> tuple[dict, OptimizerSpec]:
    """`(mapping, parse_spec(mapping))`, both shared with an earlier equal mapping (equal JSON:
    `3` and `3.0` differ) if one was parsed recently. Raises `SpecError` as `parse_spec` does."""
    try:
        key = json.dumps(mapping, sort_keys=True)
    except (TypeError, ValueError):  # not JSON: parse_spec says why (never cached)
        return mapping, parse_spec(mapping)
    hit = _PARSED.pop(key, None)
    if hit is None:
        hit = (mapping, parse_spec(mapping))
    _PARSED[key] = hit  # the newest last; the oldest dropped beyond _PARSED_KEPT
    while len(_PARSED) > _PARSED_KEPT:
        del _PARSED[next(iter(_PARSED))]
    return hit


def _plant_key(spec_key: str) -> str:
    """A `parse_spec` key as the plant file spells it (domain and sense come from the plant level)."""
    if spec_key.startswith("domain"):
        return "parameters"
    if spec_key.startswith("safety"):
        return spec_key
    return spec_key if spec_key in ("sense", "optimizer") else f"optimizer.{spec_key}"


def _parameters(value) -> tuple[ParameterConfig, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidValue("parameters", "must be a non-empty list",
                       "continuous {name, lower, upper, unit, scaling} items, or one {name, arms}")
    out: list[ParameterConfig] = []
    for i, item in enumerate(value):
        key = f"parameters[{i}]"
        m = _mapping(item, key)
        name = m.get("name")
        if not (isinstance(name, str) and name.isidentifier() and name.isascii() and len(name) <= 64):
            raise InvalidValue(f"{key}.name", f"{name!r} is not an identifier",
                           "1..64 ASCII letters, digits, _ ; not starting with a digit")
        for j, p in enumerate(out):
            if p.name == name:
                raise InvalidValue(f"{key}.name", f"{name!r} is already the name of parameters[{j}]")
        out.append(_arm(m, key, name) if "arms" in m else _continuous(m, key, name))
    if len(out) > 1 and any(p.arms is not None for p in out):
        raise InvalidValue("parameters", "an arm parameter must be the only parameter of its plant")
    scaled = [p.scaling is not None for p in out]
    if any(scaled) and not all(scaled):
        i, j = scaled.index(False), scaled.index(True)
        raise InvalidValue(f"parameters[{i}].scaling",
                       f"is required because parameters[{j}] has one: "
                       "give every parameter a scaling or none")
    return tuple(out)


def _arm(m: Mapping, key: str, name: str) -> ParameterConfig:
    _check_keys(m, {"name", "arms"}, f"{key}.")
    return ParameterConfig(name, arms=_integer(m["arms"], f"{key}.arms", 1, MAX_FINITE_POINTS))


def _continuous(m: Mapping, key: str, name: str) -> ParameterConfig:
    _check_keys(m, {"name", "lower", "upper", "unit", "scaling"}, f"{key}.")
    for req in ("lower", "upper"):
        if req not in m:
            raise InvalidValue(f"{key}.{req}", "is required for a continuous parameter (or give `arms`)")
    lower = _number(m["lower"], f"{key}.lower")
    upper = _number(m["upper"], f"{key}.upper")
    if not lower < upper:
        raise InvalidValue(f"{key}.upper", f"{upper!r} must be greater than lower {lower!r}")
    unit = m.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise InvalidValue(f"{key}.unit", f"must be a string, got {unit!r}")
    scaling = m.get("scaling")
    if scaling is not None:
        scaling = _number(scaling, f"{key}.scaling", 0.0, lo_open=True)
    return ParameterConfig(name, lower, upper, unit, scaling)


def _failure(value) -> FailurePolicy:
    m = _mapping(value, "failure")
    kind = _choice(m.get("policy"), "failure.policy", ("penalty", "mean_plus_sigma"))
    if kind == "penalty":
        _check_keys(m, {"policy", "value"}, "failure.")
        if "value" not in m:
            raise InvalidValue("failure.value", "is required for the penalty policy (in measurement units)")
        return FailurePolicy(kind, value=_number(m["value"], "failure.value"))
    _check_keys(m, {"policy", "sigmas"}, "failure.")
    sigmas = _number(m.get("sigmas", 3.0), "failure.sigmas", 0.0, lo_open=True)
    return FailurePolicy(kind, sigmas=sigmas)


def _safety_mapping(value, parameters: tuple[ParameterConfig, ...]) -> dict:
    """The plant file's `safety:` as the core's `optimizer.safety` mapping: seeds given as
    `{parameter: value}` and `max_step` as `{parameter: step}` become lists in the parameters'
    order (a parameter `max_step` leaves out may change by its whole range)."""
    m = dict(_mapping(value, "safety"))
    names = [p.name for p in parameters]
    seeds = m.get("safe_seeds")
    if isinstance(seeds, list):
        m["safe_seeds"] = [_by_name(s, names, f"safety.safe_seeds[{i}]") for i, s in
                           enumerate(seeds)]
    step = m.get("max_step")
    if isinstance(step, Mapping):
        unknown = sorted(set(step) - set(names))
        if unknown:
            raise InvalidValue(f"safety.max_step.{unknown[0]}", "is not a parameter", ", ".join(names))
        m["max_step"] = [step.get(p.name, (p.upper or 0) - (p.lower or 0)) for p in parameters]
    return m


def _by_name(point, names: list[str], key: str):
    """A `{parameter: value}` point as a list in `names`' order (a list is kept as it is)."""
    if not isinstance(point, Mapping):
        return point
    missing, unknown = [n for n in names if n not in point], sorted(set(point) - set(names))
    if missing or unknown:
        bad = missing[0] if missing else unknown[0]
        raise InvalidValue(f"{key}.{bad}", "is missing" if missing else "is not a parameter",
                           "every parameter by name: " + ", ".join(names))
    return [point[n] for n in names]


def _optimizer_mapping(value, parameters: tuple[ParameterConfig, ...], sense: str,
                       base: Path) -> tuple[dict, dict[str, Path]]:
    """The user's `optimizer:` mapping plus `domain` and `sense` from the plant level, with side
    files read into it; and `{spec key: side file}` for the values read from a file."""
    mapping = plain(_mapping(value, "optimizer"))
    for key in ("domain", "sense", "safety", "behaviour"):
        if key in mapping:
            what = {"domain": "`parameters`", "sense": "the plant's `sense`",
                    "safety": "the plant file's top-level `safety:`",
                    "behaviour": "the tvbod that writes the plant's state (docs/configuration.md, "
                                 "Behaviour versions)"}[key]
            raise InvalidValue(f"optimizer.{key}", f"must not be set here: it comes from {what}")
    arms = parameters[0].arms
    if arms is not None:
        mapping["domain"] = {"type": "arms", "n_arms": arms}
    else:
        mapping["domain"] = {"type": "box", "lower": [p.lower for p in parameters],
                             "upper": [p.upper for p in parameters]}
        if parameters[0].scaling is not None:
            mapping["domain"]["scaling"] = [p.scaling for p in parameters]
    mapping["sense"] = sense
    mapping["behaviour"] = NEWEST
    kernel = mapping.get("kernel")
    side_files: dict[str, Path] = {}
    if isinstance(kernel, Mapping) and "empirical_from" in kernel:
        mapping["kernel"] = empirical_kernel(kernel, arms, base)
    elif arms is not None and isinstance(kernel, Mapping) and isinstance(kernel.get("matrix"), str):
        side_files["kernel.matrix"] = base / kernel["matrix"]
        mapping["kernel"] = {**kernel, "matrix": read_matrix_file(
            side_files["kernel.matrix"], "optimizer.kernel.matrix").tolist()}
    return mapping, side_files


def _canonical(value):
    """Numbers as JSON writes them identically whether YAML said `3` or `3.0`."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fingerprint(optimizer_mapping: Mapping, parameters: tuple[ParameterConfig, ...]) -> str:
    """sha256 of the canonical JSON of the optimizer mapping, every setting of its behaviour
    version spelled out (`behaviours.spelled`: equal behaviour, equal fingerprint), and the
    parameters (hex)."""
    doc = {"optimizer": spelled(optimizer_mapping),
           "parameters": [asdict(p) for p in parameters]}
    text = json.dumps(_canonical(doc), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()
