"""The daemon's sockets: binding the ROUTER (owner-only ipc sockets, CURVE before any bind) and
refusing an endpoint that a live daemon already serves."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import zmq

from tvbod.service.config import DaemonConfig
from tvbod.service.events import EventSink


def _private_directory(path: Path) -> None:
    """Create `path` (mode 0700) for the ipc socket, refusing one another user owns."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise OSError(errno.EPERM, f"runtime directory {path} belongs to uid {st.st_uid}, not to "
                      f"this daemon's uid {os.getuid()}; refusing to put the socket there")


def probe_endpoint(endpoint: str) -> str | None:
    """Why `endpoint` cannot be bound (a live daemon answers on it), or None.

    An ipc socket file that accepts a connection belongs to a running process: binding over it
    would silently steal it (ZeroMQ unlinks the file). A file nobody listens on is stale (a
    killed daemon) and is replaced. A tcp port is tried with a plain bind.
    """
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        if not os.path.exists(path):
            return None
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            return None  # ECONNREFUSED: stale socket file
        finally:
            probe.close()
        return f"{endpoint} is served by a running process (another tvbod daemon?); stop it or " \
               "configure another endpoint"
    rest = endpoint[len("tcp://"):]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if host in ("*", "localhost", "") or not port.isdigit():
        return None  # ZeroMQ resolves these itself; its bind error says EADDRINUSE
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ: TIME_WAIT is fine
    try:
        probe.bind((host, int(port)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"{endpoint}: the port is already in use (another tvbod daemon?); stop it or " \
                   "configure another endpoint"
        return None
    finally:
        probe.close()
    return None


def bind_router(ctx: zmq.Context, config: DaemonConfig, sink: EventSink):
    """`(socket, ZAP guard or None, bound endpoints)`: the ROUTER bound on every configured
    endpoint, ipc socket files owner-only."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    # Frames beyond twice the limit are dropped by libzmq (the peer is disconnected); the
    # ones in between are read and answered with `too_large`.
    sock.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_message_bytes)
    sock.setsockopt(zmq.RCVHWM, 1000 * max(1, config.max_pending_per_client))
    sock.setsockopt(zmq.SNDHWM, 10_000)
    if any("[" in e for e in config.endpoints):
        sock.setsockopt(zmq.IPV6, 1)
    # --- security (tvbod/service/security.py): CURVE server + ZAP allow-list, before any bind
    from tvbod.service.security import guard_socket

    guard = guard_socket(ctx, sock, config.curve, sink)
    # --- end security
    bound = []
    for endpoint in config.endpoints:
        if endpoint.startswith("ipc://"):
            _private_directory(Path(endpoint[len("ipc://"):]).parent)
            old = os.umask(0o077)
            try:
                sock.bind(endpoint)
            finally:
                os.umask(old)
        else:
            sock.bind(endpoint)
        bound.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    return sock, guard, bound

