"""Daemon and plant configuration: YAML read once, validated at the edge into frozen dataclasses.

`load_daemon_config` reads the daemon file (endpoints, directories, limits) and every plant file its
`plants` glob matches; `load_plant_config` reads one plant file (parameters, sense, failure policy,
and the core's `optimizer:` mapping, checked by `tvbod.core.parse_spec`). Every mistake is one
`ConfigError` naming the file and the dotted key, e.g.

    configs/plants/cartpole.yaml: optimizer.kernel.lengthscales[2]: -1.0 is out of range (allowed: (0.0, inf])

Loading has no side effects: directories are computed, not created; key files named by `security:`
are read and checked (tvbod.service.security). docs/configuration.md is the reference for every
key, docs/security.md explains the `security:` section.

One module per purpose: `common` (ConfigError, the YAML reader, paths), `plants` (plant files),
`side_files` (a plant's kernel matrix and empirical samples read from files), `endpoints` (endpoints and default directories), `curve` (the `security:` section), `daemon` (the
daemon file). The checks themselves are the core's validator kit (tvbod/core/validate.py), shared
with `tvbod.core.spec`.
"""

from tvbod.core.kernels import empirical_covariance
from tvbod.service.config.common import ConfigError
from tvbod.service.config.daemon import (
    DAEMON_LIMITS, LOG_LEVELS, METRICS_DEFAULT_ADDRESS, DaemonConfig, load_daemon_config,
)
from tvbod.service.daemon_file import DEFAULT_DAEMON_FILE
from tvbod.service.config.endpoints import DEFAULT_ENDPOINT, default_runtime_dir, default_state_dir
from tvbod.service.config.plants import (
    DEFAULT_MAX_MEASUREMENT_SIGMAS, FailurePolicy, ParameterConfig, PlantConfig, fingerprint,
    inherit, load_plant_config,
)

__all__ = [
    "DAEMON_LIMITS", "DEFAULT_DAEMON_FILE", "DEFAULT_ENDPOINT", "DEFAULT_MAX_MEASUREMENT_SIGMAS",
    "LOG_LEVELS", "METRICS_DEFAULT_ADDRESS", "ConfigError", "DaemonConfig", "FailurePolicy",
    "ParameterConfig", "PlantConfig", "default_runtime_dir", "default_state_dir",
    "empirical_covariance", "fingerprint", "inherit", "load_daemon_config", "load_plant_config",
]
