"""The daemon file: endpoints, directories, limits, logging, metrics, security, and every plant
file its `plants` globs match, validated into a frozen `DaemonConfig`."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tvbod.core.validate import InvalidValue, check_keys as _check_keys, choice as _choice
from tvbod.core.validate import defaults, integer as _integer, mapping as _mapping
from tvbod.core.validate import string as _string
from tvbod.service.config.common import ConfigError, in_file, path_value, read_yaml
from tvbod.service.config.curve import security_section
from tvbod.service.config.endpoints import (
    DEFAULT_ENDPOINT, default_runtime_dir, default_state_dir, endpoints,
)
from tvbod.service.config.plants import PlantConfig, load_plant_config
from tvbod.service.daemon_file import find_daemon_file

if TYPE_CHECKING:
    from tvbod.service.security import CurveConfig

#: Integer daemon keys: (lowest, highest); the defaults are `DaemonConfig`'s.
DAEMON_LIMITS = {
    "checkpoint_every": (1, 100_000),
    "request_cache": (1, 4096),
    "max_message_bytes": (1024, 16 * 1024 * 1024),
    "max_pending_per_client": (1, 1024),
    "ask_time_budget_ms": (1, 60_000),
    "events_segment_bytes": (4096, 2**40),
    "events_keep_segments": (0, 1_000_000),
    "model_workers": (1, 64),
}
LOG_LEVELS = ("debug", "info", "warning", "error")
#: `model_worker_kind`: where plants' model jobs run (tvbod/service/workers.py).
WORKER_KINDS = ("thread", "process")
#: `metrics:` defaults: the Prometheus endpoint listens on loopback unless told otherwise.
METRICS_DEFAULT_ADDRESS = "127.0.0.1"
_DAEMON_KEYS = {
    "endpoints", "runtime_dir", "state_dir", "log_format", "log_level", "plants", "security",
    "metrics", "model_worker_kind", *DAEMON_LIMITS,
}


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
    #: Workers preparing plants' next steps (tvbod/service/workers.py), and their kind.
    model_workers: int = 2
    model_worker_kind: str = "thread"
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


_DEFAULTS = defaults(DaemonConfig)


def load_daemon_config(path: Path | str | None = None, env: Mapping[str, str] = os.environ, *,
                       isatty: bool | None = None) -> DaemonConfig:
    """Read the daemon file and every plant file it names.

    `path` defaults to `$TVBOD_CONFIG`, else the first daemon file of the search path
    (`tvbod.service.daemon_file.find_daemon_file`). `env` supplies those and the systemd and XDG
    directory variables. `log_format: auto` stays `auto` unless `isatty` is given, then it is
    `console` for a terminal and `json` otherwise."""
    path, found_by = find_daemon_file(path, env)
    try:
        m = read_yaml(path)
    except ConfigError as exc:
        if found_by != "$TVBOD_CONFIG" or exc.key is not None:
            raise
        raise ConfigError(path, None, f"{exc.problem} (named by $TVBOD_CONFIG)") from None
    base = path.resolve().parent
    with in_file(path):
        _check_keys(m, _DAEMON_KEYS)
        runtime_dir = (path_value(m["runtime_dir"], "runtime_dir", base, env) if "runtime_dir" in m
                       else default_runtime_dir(env))
        state_dir = (path_value(m["state_dir"], "state_dir", base, env) if "state_dir" in m
                     else default_state_dir(env))
        curve = security_section(m["security"], base, env) if "security" in m else None
        bound = endpoints(m.get("endpoints", [DEFAULT_ENDPOINT]), runtime_dir, base,
                          remote_ok=curve is not None)
        log_format = _choice(m.get("log_format", "auto"), "log_format", ("auto", "json", "console"))
        if log_format == "auto" and isatty is not None:
            log_format = "console" if isatty else "json"
        log_level = _choice(m.get("log_level", _DEFAULTS.log_level), "log_level", LOG_LEVELS)
        worker_kind = _choice(m.get("model_worker_kind", _DEFAULTS.model_worker_kind),
                              "model_worker_kind", WORKER_KINDS)
        metrics = _metrics(m["metrics"]) if "metrics" in m else None
        limits = {k: _integer(m.get(k, getattr(_DEFAULTS, k)), k, lo, hi)
                  for k, (lo, hi) in DAEMON_LIMITS.items()}
        patterns = m.get("plants", "plants/*.yaml")
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not patterns:
            raise InvalidValue("plants", "must be a glob or a non-empty list of globs")
        files = _plant_files([_string(p, f"plants[{i}]") for i, p in enumerate(patterns)], path)
    return DaemonConfig(path=path.resolve(), endpoints=bound, runtime_dir=runtime_dir,
                        state_dir=state_dir, log_format=log_format, plants=_load_plants(files),
                        curve=curve, log_level=log_level, metrics=metrics,
                        state_dir_configured="state_dir" in m, model_worker_kind=worker_kind,
                        **limits)


def _metrics(value) -> tuple[str, int]:
    """`metrics: {port: 9464, address: 127.0.0.1}`: the optional Prometheus endpoint."""
    import importlib.util

    m = _mapping(value, "metrics")
    _check_keys(m, {"port", "address"}, "metrics.")
    if "port" not in m:
        raise InvalidValue("metrics.port", "is required to serve metrics", "[1, 65535]")
    port = _integer(m["port"], "metrics.port", 1, 65535)
    address = _string(m.get("address", METRICS_DEFAULT_ADDRESS), "metrics.address")
    if importlib.util.find_spec("prometheus_client") is None:
        raise InvalidValue("metrics", "needs the prometheus-client package, which is not installed",
                       "pip install 'tvbod[metrics]', or remove the metrics section")
    return address, port


def _plant_files(patterns: list[str], daemon_path: Path) -> list[Path]:
    """Files the globs match, relative to the daemon file's directory, sorted, without repeats."""
    files: list[Path] = []
    seen: set[Path] = set()  # resolved: one path resolved once (100 files: 5050 resolves before)
    for pattern in patterns:
        full = Path(pattern) if Path(pattern).is_absolute() else daemon_path.parent / pattern
        for f in sorted(glob.glob(str(full), recursive=True)):
            resolved = Path(f).resolve()
            if resolved not in seen and Path(f).is_file():
                seen.add(resolved)
                files.append(Path(f))
    if not files:
        raise InvalidValue("plants", f"{patterns} matches no plant file next to {daemon_path}",
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
