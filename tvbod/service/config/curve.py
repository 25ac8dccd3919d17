"""The daemon file's `security:` section: CURVE on every endpoint, the server's secret key and
the clients' allow-list, read and checked by tvbod.service.security (docs/security.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tvbod.core.validate import InvalidValue, check_keys as _check_keys, mapping as _mapping
from tvbod.service.config.common import path_value

if TYPE_CHECKING:
    from tvbod.service.security import CurveConfig

_CURVE_KEYS = {"server_secret_key", "allowed_clients"}


def security_section(value, base: Path, env: Mapping[str, str]) -> CurveConfig:
    """`security: {curve: {server_secret_key: FILE, allowed_clients: DIR | [FILE, ...]}}`."""
    # Imported here: tvbod.service.security loads zmq.auth's thread (and asyncio), which a daemon
    # without a `security:` section and `tvbod status` do not need.
    from tvbod.service.security import (
        CurveConfig, KeyFileError, public_key_files, read_public_key, read_secret_key,
    )

    m = _mapping(value, "security")
    _check_keys(m, {"curve"}, "security.")
    if "curve" not in m:
        raise InvalidValue("security.curve", "is required (CURVE is the only mechanism)",
                       "curve: {server_secret_key: FILE, allowed_clients: DIR or [FILE, ...]}")
    c = _mapping(m["curve"], "security.curve")
    _check_keys(c, _CURVE_KEYS, "security.curve.")
    for req in sorted(_CURVE_KEYS):
        if req not in c:
            raise InvalidValue(f"security.curve.{req}", "is required")
    key = "security.curve.server_secret_key"
    secret_file = path_value(c["server_secret_key"], key, base, env)
    try:
        public, secret = read_secret_key(secret_file)
    except KeyFileError as e:
        raise InvalidValue(key, str(e)) from None
    key = "security.curve.allowed_clients"
    allowed = c["allowed_clients"]
    if isinstance(allowed, str):
        try:
            sources = [(key, f) for f in public_key_files(path_value(allowed, key, base, env))]
        except KeyFileError as e:
            raise InvalidValue(key, str(e)) from None
    elif isinstance(allowed, list) and allowed:
        sources = [(f"{key}[{i}]", path_value(v, f"{key}[{i}]", base, env)) for i, v in enumerate(allowed)]
    else:
        raise InvalidValue(key, f"must be a directory or a non-empty list of public-key files, got "
                       f"{allowed!r}")
    keys = []
    for k, f in sources:
        try:
            keys.append(read_public_key(f))
        except KeyFileError as e:
            raise InvalidValue(k, str(e)) from None
    return CurveConfig(secret_file, public, secret, tuple(f for _, f in sources), frozenset(keys))
