"""The daemon file's `endpoints` (ipc socket files; tcp on loopback unless CURVE guards the
socket) and the default runtime and state directories (systemd, XDG, home)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

from tvbod.core.validate import InvalidValue, string as _string
from tvbod.service.config.common import home

DEFAULT_ENDPOINT = "ipc://{runtime_dir}/tvbod.sock"
_LOCAL_TCP = "ipc://PATH, tcp://127.0.0.1:PORT, tcp://[::1]:PORT, tcp://localhost:PORT"
_ANY_TCP = "ipc://PATH, tcp://HOST:PORT (HOST: an address, *, or an interface name)"
#: `sun_path` holds 108 bytes on Linux including the terminating NUL.
_MAX_IPC_PATH_BYTES = 107


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
    return home(env) / ".local" / "state" / "tvbod"


def endpoints(value, runtime_dir: Path, base: Path, *, remote_ok: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidValue("endpoints", "must be a non-empty list of endpoints",
                       _ANY_TCP if remote_ok else _LOCAL_TCP)
    out = tuple(_endpoint(v, f"endpoints[{i}]", runtime_dir, base, remote_ok)
                for i, v in enumerate(value))
    for i, e in enumerate(out):
        if e in out[:i]:
            raise InvalidValue(f"endpoints[{i}]", f"{e!r} is listed twice")
    return out


def _endpoint(value, key: str, runtime_dir: Path, base: Path, remote_ok: bool) -> str:
    raw = _string(value, key)
    text = raw.replace("{runtime_dir}", str(runtime_dir))
    if "{" in text or "}" in text:
        raise InvalidValue(key, f"{raw!r} has an unknown placeholder", "{runtime_dir}")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("ipc", "tcp"):
        raise InvalidValue(key, f"{raw!r} has an unsupported scheme", _LOCAL_TCP)
    return _ipc(rest, key, base) if scheme == "ipc" else _tcp(rest, key, raw, remote_ok)


def _ipc(rest: str, key: str, base: Path) -> str:
    if not rest or rest == "*" or rest.startswith("@"):
        # Abstract sockets (`@name`) have no file permissions: any local user could connect.
        raise InvalidValue(key, f"ipc://{rest} is not a socket file path", "ipc://PATH")
    path = os.path.normpath(base / rest)
    if len(os.fsencode(path)) > _MAX_IPC_PATH_BYTES:
        raise InvalidValue(key, f"socket path {path} is longer than {_MAX_IPC_PATH_BYTES} bytes; "
                       "use a shorter runtime_dir")
    return f"ipc://{path}"


def _tcp(rest: str, key: str, raw: str, remote_ok: bool) -> str:
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.rpartition(":")
        if ":" in host:
            raise InvalidValue(key, f"{raw!r}: write an IPv6 address in brackets", "tcp://[::1]:PORT")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidValue(key, f"{raw!r} needs a port in [1, 65535]", _LOCAL_TCP)
    if not host:
        raise InvalidValue(key, f"{raw!r} needs a host", _ANY_TCP if remote_ok else _LOCAL_TCP)
    if not remote_ok and not _is_loopback(host):
        # Anyone on the network could steer the plants: only CURVE clients may reach a remote bind.
        raise InvalidValue(key, f"{raw!r} binds to {host!r}, which is not loopback; remote binding "
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
