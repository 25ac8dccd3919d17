"""Daemon and plant configuration: YAML read once, validated at the edge into frozen dataclasses.

`load_daemon_config` reads the daemon file (endpoints, directories, limits) and every plant file its
`plants` glob matches; `load_plant_config` reads one plant file (parameters, sense, failure policy,
and the core's `optimizer:` mapping, checked by `tvbod.core.parse_spec`). Every mistake is one
`ConfigError` naming the file and the dotted key, e.g.

    configs/plants/cartpole.yaml: optimizer.kernel.lengthscales[2]: -1.0 is out of range (allowed: (0.0, inf])

Loading has no side effects: directories are computed, not created; key files named by `security:`
are read and checked (tvbod.service.security). docs/configuration.md is the reference for every
key, docs/security.md explains the `security:` section.
"""

from __future__ import annotations

import glob
import hashlib
import ipaddress
import json
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tvbod.core.errors import DomainError, SpecError, TvbodError
from tvbod.core.spec import MAX_FINITE_POINTS, OptimizerSpec, parse_spec, with_explicit_trigger
from tvbod.protocol import PLANT_NAME_PATTERN, is_valid_plant_name
from tvbod.service.security import (
    CurveConfig, KeyFileError, public_key_files, read_public_key, read_secret_key,
)

#: Daemon file used when no path is given and `$TVBOD_CONFIG` is unset (relative to the cwd).
DEFAULT_DAEMON_FILE = Path("configs/tvbod.yaml")
DEFAULT_ENDPOINT = "ipc://{runtime_dir}/tvbod.sock"
#: Integer daemon keys: (default, lowest, highest).
DAEMON_LIMITS = {
    "checkpoint_every": (50, 1, 100_000),
    "request_cache": (64, 1, 4096),
    "max_message_bytes": (65536, 1024, 16 * 1024 * 1024),
    "max_pending_per_client": (16, 1, 1024),
    "ask_time_budget_ms": (200, 1, 60_000),
    "events_segment_bytes": (64 * 1024 * 1024, 4096, 2**40),
    "events_keep_segments": (16, 0, 1_000_000),
}
LOG_LEVELS = ("debug", "info", "warning", "error")
#: `metrics:` defaults: the Prometheus endpoint listens on loopback unless told otherwise.
METRICS_DEFAULT_ADDRESS = "127.0.0.1"
_DAEMON_KEYS = {
    "endpoints", "runtime_dir", "state_dir", "log_format", "log_level", "plants", "security",
    "metrics", *DAEMON_LIMITS,
}
_CURVE_KEYS = {"server_secret_key", "allowed_clients"}
_PLANT_KEYS = {
    "name", "description", "parameters", "sense", "optimizer", "proposal_timeout", "failure",
    "max_measurement_sigmas",
}
#: Default of `max_measurement_sigmas`: measurements farther from the offset (GP scale, in prior
#: standard deviations) are refused with `bad_field`.
DEFAULT_MAX_MEASUREMENT_SIGMAS = 1e6
_LOCAL_TCP = "ipc://PATH, tcp://127.0.0.1:PORT, tcp://[::1]:PORT, tcp://localhost:PORT"
_ANY_TCP = "ipc://PATH, tcp://HOST:PORT (HOST: an address, *, or an interface name)"
#: `sun_path` holds 108 bytes on Linux including the terminating NUL.
_MAX_IPC_PATH_BYTES = 107
#: Decimals kept of an empirical covariance, so its fingerprint does not depend on BLAS round-off.
_EMPIRICAL_DECIMALS = 12


class ConfigError(TvbodError, ValueError):
    """A configuration file is invalid. `file`, `key` (dotted path, None for the whole file),
    `problem`, `allowed` (what would be accepted, or None) and `line` (YAML syntax errors)."""

    def __init__(self, file: Path | str, key: str | None, problem: str, allowed: str | None = None,
                 line: int | None = None) -> None:
        self.file, self.key, self.problem = Path(file), key, problem
        self.allowed, self.line = allowed, line
        text = f"{file}" + (f":{line}" if line else "") + ": " + (f"{key}: " if key else "")
        text += problem
        super().__init__(text + (f" (allowed: {allowed})" if allowed else ""))


class _Invalid(TvbodError):
    """A problem at `key` of the file being read; `_in_file` turns it into a `ConfigError`."""

    def __init__(self, key: str, problem: str, allowed: str | None = None) -> None:
        super().__init__(key, problem, allowed)
        self.key, self.problem, self.allowed = key, problem, allowed


@contextmanager
def _in_file(path: Path) -> Iterator[None]:
    try:
        yield
    except _Invalid as e:
        raise ConfigError(path, e.key, e.problem, e.allowed) from None


# ---------------------------------------------------------------------- dataclasses
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


@dataclass(frozen=True)
class DaemonConfig:
    """The daemon file, validated, with every plant it names. Paths are absolute."""

    path: Path
    endpoints: tuple[str, ...]
    runtime_dir: Path
    state_dir: Path
    log_format: str  # json | console | auto (auto is resolved when `isatty` is given to the loader)
    plants: tuple[PlantConfig, ...]
    checkpoint_every: int = 50
    request_cache: int = 64
    max_message_bytes: int = 65536
    max_pending_per_client: int = 16
    ask_time_budget_ms: int = 200
    events_segment_bytes: int = 64 * 1024 * 1024
    events_keep_segments: int = 16
    log_level: str = "info"
    #: `metrics:` (address, port) of the Prometheus endpoint; None: no endpoint.
    metrics: tuple[str, int] | None = None
    #: True when the file names `state_dir` (then only its last component may be created).
    state_dir_configured: bool = False
    #: `security.curve`: CURVE on every endpoint plus the client allow-list; None: no CURVE.
    curve: CurveConfig | None = None

    def plant(self, name: str) -> PlantConfig:
        """The plant called `name` (KeyError if there is none)."""
        for p in self.plants:
            if p.name == name:
                return p
        raise KeyError(name)


def _arm_index(v, name: str) -> int:
    if not float(v).is_integer():
        raise DomainError(f"arm {name!r} must be an integer index, got {v!r}")
    return int(v)


# ---------------------------------------------------------------------- small validators
def _mapping(value, key: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise _Invalid(key, f"must be a mapping, got {type(value).__name__}")
    return value


def _check_keys(m: Mapping, allowed: set[str], prefix: str = "") -> None:
    for k in m:
        if k not in allowed:
            raise _Invalid(f"{prefix}{k}", "unknown key", ", ".join(sorted(allowed)))


def _number(value, key: str, lo: float = -math.inf, hi: float = math.inf, *,
            lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(key, f"must be a number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi):
        raise _Invalid(key, f"{v!r} is out of range", f"{'(' if lo_open else '['}{lo}, {hi}]")
    return v


def _integer(value, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(key, f"must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise _Invalid(key, f"{value} is out of range", f"[{lo}, {hi}]")
    return value


def _string(value, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(key, f"must be a non-empty string, got {value!r}")
    return value


def _choice(value, key: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise _Invalid(key, f"{value!r} is not supported", ", ".join(allowed))
    return value


def _path(value, key: str, base: Path, env: Mapping[str, str]) -> Path:
    """A path from the file: `~` is the user's home, a relative path is relative to `base`."""
    s = _string(value, key)
    if s == "~" or s.startswith("~/"):
        s = str(_home(env)) + s[1:]
    return Path(os.path.normpath(base / s))


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


# ---------------------------------------------------------------------- reading YAML
def _read_yaml(path: Path) -> Mapping:
    """Parse `path` with the safe loader; refuse duplicate keys (YAML would keep the last)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, "is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(path, None, f"cannot be read ({e.strerror})") from None
    try:
        _refuse_duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), path, "", set())
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ConfigError(path, None, f"invalid YAML: {e.problem or e.context}",
                          line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise ConfigError(path, None, f"invalid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, None,
                          f"must hold a mapping at the top level, got {type(data).__name__}")
    return data


def _refuse_duplicate_keys(node, path: Path, prefix: str, seen_nodes: set[int]) -> None:
    if node is None or id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            line = k.start_mark.line + 1
            if name in lines and name != "<<":
                raise ConfigError(path, prefix + name,
                                  f"appears twice (lines {lines[name]} and {line})", line=line)
            lines[name] = line
            _refuse_duplicate_keys(v, path, f"{prefix}{name}.", seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _refuse_duplicate_keys(v, path, f"{prefix.rstrip('.')}[{i}].", seen_nodes)


def _plain(value, depth: int = 0):
    """A deep copy of YAML data as dicts, lists and scalars (refusing absurd nesting)."""
    if depth > 32:
        raise _Invalid("optimizer", "is nested too deeply")
    if isinstance(value, Mapping):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    return value


# ---------------------------------------------------------------------- plant files
def load_plant_config(path: Path | str) -> PlantConfig:
    """Read and validate one plant file (see docs/configuration.md)."""
    path = Path(path)
    data = _read_yaml(path)
    with _in_file(path):
        return _plant(data, path)


def _plant(m: Mapping, path: Path) -> PlantConfig:
    _check_keys(m, _PLANT_KEYS)
    if "name" not in m:
        raise _Invalid("name", "is required")
    name = m["name"]
    if not is_valid_plant_name(name):
        raise _Invalid("name", f"{name!r} is not a valid plant name", PLANT_NAME_PATTERN)
    description = m.get("description", "")
    if not isinstance(description, str):
        raise _Invalid("description", f"must be a string, got {description!r}")
    parameters = _parameters(m.get("parameters"))
    if "sense" not in m:
        raise _Invalid("sense", "is required: is the measurement a cost or a reward?",
                       "minimize (a cost), maximize (a reward)")
    sense = _choice(m["sense"], "sense", ("minimize", "maximize"))
    mapping = _optimizer_mapping(m.get("optimizer", {}), parameters, sense, path.parent)
    try:
        spec = parse_spec(mapping)
    except SpecError as e:
        raise _Invalid(_plant_key(e.key), e.problem, e.allowed) from None
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
    )


def _plant_key(spec_key: str) -> str:
    """A `parse_spec` key as the plant file spells it (domain and sense come from the plant level)."""
    if spec_key.startswith("domain"):
        return "parameters"
    return spec_key if spec_key in ("sense", "optimizer") else f"optimizer.{spec_key}"


def _parameters(value) -> tuple[ParameterConfig, ...]:
    if not isinstance(value, list) or not value:
        raise _Invalid("parameters", "must be a non-empty list",
                       "continuous {name, lower, upper, unit, scaling} items, or one {name, arms}")
    out: list[ParameterConfig] = []
    for i, item in enumerate(value):
        key = f"parameters[{i}]"
        m = _mapping(item, key)
        name = m.get("name")
        if not (isinstance(name, str) and name.isidentifier() and name.isascii() and len(name) <= 64):
            raise _Invalid(f"{key}.name", f"{name!r} is not an identifier",
                           "1..64 ASCII letters, digits, _ ; not starting with a digit")
        for j, p in enumerate(out):
            if p.name == name:
                raise _Invalid(f"{key}.name", f"{name!r} is already the name of parameters[{j}]")
        out.append(_arm(m, key, name) if "arms" in m else _continuous(m, key, name))
    if len(out) > 1 and any(p.arms is not None for p in out):
        raise _Invalid("parameters", "an arm parameter must be the only parameter of its plant")
    scaled = [p.scaling is not None for p in out]
    if any(scaled) and not all(scaled):
        i, j = scaled.index(False), scaled.index(True)
        raise _Invalid(f"parameters[{i}].scaling",
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
            raise _Invalid(f"{key}.{req}", "is required for a continuous parameter (or give `arms`)")
    lower = _number(m["lower"], f"{key}.lower")
    upper = _number(m["upper"], f"{key}.upper")
    if not lower < upper:
        raise _Invalid(f"{key}.upper", f"{upper!r} must be greater than lower {lower!r}")
    unit = m.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise _Invalid(f"{key}.unit", f"must be a string, got {unit!r}")
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
            raise _Invalid("failure.value", "is required for the penalty policy (in measurement units)")
        return FailurePolicy(kind, value=_number(m["value"], "failure.value"))
    _check_keys(m, {"policy", "sigmas"}, "failure.")
    sigmas = _number(m.get("sigmas", 3.0), "failure.sigmas", 0.0, lo_open=True)
    return FailurePolicy(kind, sigmas=sigmas)


def _optimizer_mapping(value, parameters: tuple[ParameterConfig, ...], sense: str,
                       base: Path) -> dict:
    """The user's `optimizer:` mapping plus `domain` and `sense` from the plant level."""
    mapping = _plain(_mapping(value, "optimizer"))
    for key in ("domain", "sense"):
        if key in mapping:
            what = "`parameters`" if key == "domain" else "the plant's `sense`"
            raise _Invalid(f"optimizer.{key}", f"must not be set here: it comes from {what}")
    arms = parameters[0].arms
    if arms is not None:
        mapping["domain"] = {"type": "arms", "n_arms": arms}
    else:
        mapping["domain"] = {"type": "box", "lower": [p.lower for p in parameters],
                             "upper": [p.upper for p in parameters]}
        if parameters[0].scaling is not None:
            mapping["domain"]["scaling"] = [p.scaling for p in parameters]
    mapping["sense"] = sense
    mapping = with_explicit_trigger(mapping)
    kernel = mapping.get("kernel")
    if isinstance(kernel, Mapping) and "empirical_from" in kernel:
        mapping["kernel"] = _empirical_kernel(kernel, arms, base)
    return mapping


def _empirical_kernel(kernel: Mapping, arms: int | None, base: Path) -> dict:
    key = "optimizer.kernel.empirical_from"
    if arms is None:
        raise _Invalid(key, "is for an arm parameter; a continuous domain needs", "se, matern52")
    _check_keys(kernel, {"type", "empirical_from"}, "optimizer.kernel.")
    _choice(kernel.get("type", "matrix"), "optimizer.kernel.type", ("matrix",))
    csv = base / _string(kernel["empirical_from"], key)
    try:
        samples = np.loadtxt(csv, delimiter=",", ndmin=2, dtype=float)
    except OSError as e:
        raise _Invalid(key, f"cannot read {csv} ({e.strerror or e})") from None
    except ValueError as e:
        raise _Invalid(key, f"{csv} is not a CSV of numbers ({e})") from None
    if samples.shape[0] != arms:
        raise _Invalid(key, f"{csv} has {samples.shape[0]} rows, one per arm, but the arm parameter "
                       f"has {arms} arms")
    if samples.shape[1] < 2 or not np.all(np.isfinite(samples)) or np.std(samples) == 0:
        raise _Invalid(key, f"{csv} needs at least 2 columns of finite, not all equal, numbers")
    return {"type": "matrix", "matrix": empirical_covariance(samples).tolist()}


def empirical_covariance(samples: np.ndarray) -> np.ndarray:
    """Kernel over arms from samples `(m, n)` (row = arm, column = sample).

    All values are standardized by the global mean and std of the array, then `K = np.cov(rows)`
    `(m, m)` (the ET-GP-UCB temperature experiment); symmetrized and rounded to 12 decimals so the
    result, and hence the plant's fingerprint, does not depend on BLAS round-off."""
    a = np.asarray(samples, dtype=float)
    K = np.atleast_2d(np.cov((a - a.mean()) / a.std()))
    return np.round(0.5 * (K + K.T), _EMPIRICAL_DECIMALS)


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
    """sha256 of the canonical JSON of the optimizer mapping and the parameters (hex)."""
    doc = {"optimizer": optimizer_mapping, "parameters": [asdict(p) for p in parameters]}
    text = json.dumps(_canonical(doc), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------- daemon file
def load_daemon_config(path: Path | str | None = None, env: Mapping[str, str] = os.environ, *,
                       isatty: bool | None = None) -> DaemonConfig:
    """Read the daemon file and every plant file it names.

    `path` defaults to `$TVBOD_CONFIG`, else `configs/tvbod.yaml`. `env` supplies the systemd and
    XDG directory variables. `log_format: auto` stays `auto` unless `isatty` is given, then it is
    `console` for a terminal and `json` otherwise."""
    path = Path(path if path is not None else env.get("TVBOD_CONFIG") or DEFAULT_DAEMON_FILE)
    m = _read_yaml(path)
    base = path.resolve().parent
    with _in_file(path):
        _check_keys(m, _DAEMON_KEYS)
        runtime_dir = (_path(m["runtime_dir"], "runtime_dir", base, env) if "runtime_dir" in m
                       else default_runtime_dir(env))
        state_dir = (_path(m["state_dir"], "state_dir", base, env) if "state_dir" in m
                     else default_state_dir(env))
        curve = _security(m["security"], base, env) if "security" in m else None
        endpoints = _endpoints(m.get("endpoints", [DEFAULT_ENDPOINT]), runtime_dir, base,
                               remote_ok=curve is not None)
        log_format = _choice(m.get("log_format", "auto"), "log_format", ("auto", "json", "console"))
        if log_format == "auto" and isatty is not None:
            log_format = "console" if isatty else "json"
        log_level = _choice(m.get("log_level", "info"), "log_level", LOG_LEVELS)
        metrics = _metrics(m["metrics"]) if "metrics" in m else None
        limits = {k: _integer(m.get(k, d), k, lo, hi) for k, (d, lo, hi) in DAEMON_LIMITS.items()}
        patterns = m.get("plants", "plants/*.yaml")
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not patterns:
            raise _Invalid("plants", "must be a glob or a non-empty list of globs")
        files = _plant_files([_string(p, f"plants[{i}]") for i, p in enumerate(patterns)], path)
    return DaemonConfig(path=path.resolve(), endpoints=endpoints, runtime_dir=runtime_dir,
                        state_dir=state_dir, log_format=log_format, plants=_load_plants(files),
                        curve=curve, log_level=log_level, metrics=metrics,
                        state_dir_configured="state_dir" in m, **limits)


def _metrics(value) -> tuple[str, int]:
    """`metrics: {port: 9464, address: 127.0.0.1}`: the optional Prometheus endpoint."""
    import importlib.util

    m = _mapping(value, "metrics")
    _check_keys(m, {"port", "address"}, "metrics.")
    if "port" not in m:
        raise _Invalid("metrics.port", "is required to serve metrics", "[1, 65535]")
    port = _integer(m["port"], "metrics.port", 1, 65535)
    address = _string(m.get("address", METRICS_DEFAULT_ADDRESS), "metrics.address")
    if importlib.util.find_spec("prometheus_client") is None:
        raise _Invalid("metrics", "needs the prometheus-client package, which is not installed",
                       "pip install 'tvbod[metrics]', or remove the metrics section")
    return address, port


def _security(value, base: Path, env: Mapping[str, str]) -> CurveConfig:
    """`security: {curve: {server_secret_key: FILE, allowed_clients: DIR | [FILE, ...]}}`."""
    m = _mapping(value, "security")
    _check_keys(m, {"curve"}, "security.")
    if "curve" not in m:
        raise _Invalid("security.curve", "is required (CURVE is the only mechanism)",
                       "curve: {server_secret_key: FILE, allowed_clients: DIR or [FILE, ...]}")
    c = _mapping(m["curve"], "security.curve")
    _check_keys(c, _CURVE_KEYS, "security.curve.")
    for req in sorted(_CURVE_KEYS):
        if req not in c:
            raise _Invalid(f"security.curve.{req}", "is required")
    key = "security.curve.server_secret_key"
    secret_file = _path(c["server_secret_key"], key, base, env)
    try:
        public, secret = read_secret_key(secret_file)
    except KeyFileError as e:
        raise _Invalid(key, str(e)) from None
    key = "security.curve.allowed_clients"
    allowed = c["allowed_clients"]
    if isinstance(allowed, str):
        try:
            sources = [(key, f) for f in public_key_files(_path(allowed, key, base, env))]
        except KeyFileError as e:
            raise _Invalid(key, str(e)) from None
    elif isinstance(allowed, list) and allowed:
        sources = [(f"{key}[{i}]", _path(v, f"{key}[{i}]", base, env)) for i, v in enumerate(allowed)]
    else:
        raise _Invalid(key, f"must be a directory or a non-empty list of public-key files, got "
                       f"{allowed!r}")
    keys = []
    for k, f in sources:
        try:
            keys.append(read_public_key(f))
        except KeyFileError as e:
            raise _Invalid(k, str(e)) from None
    return CurveConfig(secret_file, public, secret, tuple(f for _, f in sources), frozenset(keys))


def default_runtime_dir(env: Mapping[str, str]) -> Path:
    """`$RUNTIME_DIRECTORY` (systemd; its first entry), else `$XDG_RUNTIME_DIR/tvbod`, else
    `/tmp/tvbod-<uid>`."""
    if env.get("RUNTIME_DIRECTORY"):
        return Path(env["RUNTIME_DIRECTORY"].split(":")[0])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "tvbod"
    return Path(f"/tmp/tvbod-{os.getuid()}")


def default_state_dir(env: Mapping[str, str]) -> Path:
    """`$STATE_DIRECTORY` (systemd; its first entry), else `$XDG_STATE_HOME/tvbod`, else
    `~/.local/state/tvbod` (outside the checkout, so state is never committed by accident)."""
    if env.get("STATE_DIRECTORY"):
        return Path(env["STATE_DIRECTORY"].split(":")[0])
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]) / "tvbod"
    return _home(env) / ".local" / "state" / "tvbod"


def _endpoints(value, runtime_dir: Path, base: Path, *, remote_ok: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _Invalid("endpoints", "must be a non-empty list of endpoints",
                       _ANY_TCP if remote_ok else _LOCAL_TCP)
    out = tuple(_endpoint(v, f"endpoints[{i}]", runtime_dir, base, remote_ok)
                for i, v in enumerate(value))
    for i, e in enumerate(out):
        if e in out[:i]:
            raise _Invalid(f"endpoints[{i}]", f"{e!r} is listed twice")
    return out


def _endpoint(value, key: str, runtime_dir: Path, base: Path, remote_ok: bool) -> str:
    raw = _string(value, key)
    text = raw.replace("{runtime_dir}", str(runtime_dir))
    if "{" in text or "}" in text:
        raise _Invalid(key, f"{raw!r} has an unknown placeholder", "{runtime_dir}")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("ipc", "tcp"):
        raise _Invalid(key, f"{raw!r} has an unsupported scheme", _LOCAL_TCP)
    return _ipc(rest, key, base) if scheme == "ipc" else _tcp(rest, key, raw, remote_ok)


def _ipc(rest: str, key: str, base: Path) -> str:
    if not rest or rest == "*" or rest.startswith("@"):
        # Abstract sockets (`@name`) have no file permissions: any local user could connect.
        raise _Invalid(key, f"ipc://{rest} is not a socket file path", "ipc://PATH")
    path = os.path.normpath(base / rest)
    if len(os.fsencode(path)) > _MAX_IPC_PATH_BYTES:
        raise _Invalid(key, f"socket path {path} is longer than {_MAX_IPC_PATH_BYTES} bytes; "
                       "use a shorter runtime_dir")
    return f"ipc://{path}"


def _tcp(rest: str, key: str, raw: str, remote_ok: bool) -> str:
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.rpartition(":")
        if ":" in host:
            raise _Invalid(key, f"{raw!r}: write an IPv6 address in brackets", "tcp://[::1]:PORT")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _Invalid(key, f"{raw!r} needs a port in [1, 65535]", _LOCAL_TCP)
    if not host:
        raise _Invalid(key, f"{raw!r} needs a host", _ANY_TCP if remote_ok else _LOCAL_TCP)
    if not remote_ok and not _is_loopback(host):
        # Anyone on the network could steer the plants: only CURVE clients may reach a remote bind.
        raise _Invalid(key, f"{raw!r} binds to {host!r}, which is not loopback; remote binding "
                       "requires CURVE authentication: add a `security: {curve: ...}` section "
                       "(docs/security.md)", _LOCAL_TCP)
    return f"tcp://{rest}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _plant_files(patterns: list[str], daemon_path: Path) -> list[Path]:
    """Files the globs match, relative to the daemon file's directory, sorted, without repeats."""
    files: list[Path] = []
    for pattern in patterns:
        full = Path(pattern) if Path(pattern).is_absolute() else daemon_path.parent / pattern
        for f in sorted(glob.glob(str(full), recursive=True)):
            if Path(f).is_file() and all(Path(f).resolve() != g.resolve() for g in files):
                files.append(Path(f))
    if not files:
        raise _Invalid("plants", f"{patterns} matches no plant file next to {daemon_path}",
                       "at least one plant file")
    return files


def _load_plants(files: list[Path]) -> tuple[PlantConfig, ...]:
    plants: list[PlantConfig] = []
    for f in files:
        plant = load_plant_config(f)
        for other, other_file in zip(plants, files):
            if other.name == plant.name:
                raise ConfigError(f, "name", f"{plant.name!r} is already the name of the plant in "
                                  f"{other_file}; plant names must be unique")
        plants.append(plant)
    return tuple(plants)
