"""Authenticated transport: CURVE encryption plus a ZAP allow-list of adapter public keys.

With a `security.curve` section the daemon's ROUTER socket is a CURVE server (every endpoint: the
mechanism is a property of the socket) and libzmq asks a ZAP handler (RFC 27) about every client
that completes the CURVE handshake. The handler is pyzmq's `ThreadAuthenticator` with the
allow-list read and checked at configuration load; `ZMQ_ZAP_ENFORCE_DOMAIN` makes libzmq refuse
every client while no handler answers, so a dead authenticator fails closed, not open.

Every refusal becomes a `client_refused` event: refusals by the allow-list come from the ZAP
thread (with the peer address and the client's public key), failed handshakes (no CURVE, wrong
server key) from a monitor thread (with the endpoint only; libzmq knows no more). Both threads
emit through `EventSink.emit`, which is safe off the loop thread: daemon-wide events go to stdout
only, and structlog's `WriteLogger` writes and flushes each line under one lock per file, so
lines never interleave. A loud peer is logged `REFUSAL_BURST` times per `REFUSAL_WINDOW_S`, then
counted (`suppressed` on its next logged refusal).

Key files are pyzmq/czmq certificates (`zmq.auth.create_certificates`, `tvbod keygen`): `NAME.key`
holds a public key, `NAME.key_secret` both keys. docs/security.md is the operator's guide.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from tvbod.errors import TvbodError

#: ZAP domain of the daemon's socket; the authenticator's allow-list is registered under it.
ZAP_DOMAIN = "tvbod"
#: Refusals logged per peer (address, or endpoint for handshake failures) per window.
REFUSAL_BURST = 20
REFUSAL_WINDOW_S = 10.0
_Z85_KEY_CHARS = 40  # a 32-byte Curve25519 key in Z85
_HANDSHAKE_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
HANDSHAKE_REASONS = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "no CURVE: the client did not offer CURVE",
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "CURVE handshake failed: the client has the wrong "
                                           "server public key, or the traffic was tampered with",
}
#: A peer that closes the connection mid-handshake: a port probe, or a client without CURVE that
#: saw the mechanism mismatch before the daemon did (libzmq's two sides race for it).
HUNG_UP_REASON = "closed the connection during the handshake: a client without CURVE, or a probe"
_HUNG_UP = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


class KeyFileError(TvbodError, ValueError):
    """A key file or directory is missing, malformed or too open; the message names the file."""


@dataclass(frozen=True)
class CurveConfig:
    """`security.curve`, validated: the server's key pair (Z85) and the allowed client keys."""

    server_secret_key_file: Path
    public_key: bytes
    secret_key: bytes = field(repr=False)
    allowed_client_files: tuple[Path, ...]
    client_keys: frozenset[bytes]

    @classmethod
    def load(cls, server_secret_key_file: Path, allowed_client_files: Iterable[Path]) -> CurveConfig:
        """Read and check the key files (raises `KeyFileError`)."""
        public, secret = read_secret_key(server_secret_key_file)
        files = tuple(allowed_client_files)
        return cls(Path(server_secret_key_file), public, secret, files,
                   frozenset(read_public_key(f) for f in files))


# ---------------------------------------------------------------------- key files
def _z85_key(value: bytes | None, path: Path, what: str) -> bytes:
    if value is None:
        raise KeyFileError(f"{path} holds no {what} (expected a `{what} = \"...\"` line)")
    try:
        ok = len(value) == _Z85_KEY_CHARS and len(z85.decode(value)) == 32
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise KeyFileError(f"{path}: the {what} is not a 40-character Z85 key")
    return value


def _certificate(path: Path) -> tuple[bytes | None, bytes | None]:
    if not path.is_file():
        raise KeyFileError(f"{path}: key file not found" if not path.exists()
                           else f"{path} is not a file")
    try:
        return zmq.auth.load_certificate(path)
    except ValueError:
        return None, None  # no public key: reported by the caller as such
    except OSError as e:
        raise KeyFileError(f"{path} cannot be read ({e.strerror or e})") from None


def read_secret_key(path: Path) -> tuple[bytes, bytes]:
    """`(public, secret)` Z85 keys of a secret-key file, which nobody but its owner may read."""
    path = Path(path)
    public, secret = _certificate(path)
    public = _z85_key(public, path, "public-key")
    secret = _z85_key(secret, path, "secret-key")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path} is accessible by group or others (mode {mode:04o}); a secret "
                           f"key must be private: run `chmod 600 {path}`")
    if zmq.curve_public(secret) != public:
        raise KeyFileError(f"{path}: the public-key does not belong to the secret-key")
    return public, secret


def read_public_key(path: Path) -> bytes:
    """The Z85 public key of a public-key file; refuses a file that also holds a secret key."""
    path = Path(path)
    public, secret = _certificate(path)
    _not_writable_by_others(path)
    if secret is not None:
        raise KeyFileError(f"{path} holds a secret key: give the daemon only the public NAME.key, "
                           "and keep NAME.key_secret with its adapter")
    return _z85_key(public, path, "public-key")


def public_key_files(directory: Path) -> tuple[Path, ...]:
    """The `*.key` files of an allow-list directory (the czmq convention), sorted; at least one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise KeyFileError(f"{directory}: directory not found" if not directory.exists()
                           else f"{directory} is not a directory; give a directory of NAME.key "
                                "files or a list of files")
    _not_writable_by_others(directory)
    files = tuple(sorted(p for p in directory.glob("*.key") if p.is_file()))
    if not files:
        raise KeyFileError(f"{directory} holds no public-key file (*.key); create one with "
                           "`tvbod keygen` and copy NAME.key here")
    return files


def _not_writable_by_others(path: Path) -> None:
    # Whoever can write to the allow-list can let themselves in.
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o022:
        raise KeyFileError(f"{path} is writable by group or others (mode {mode:04o}), so they could "
                           f"add a key: run `chmod go-w {path}`")


# ---------------------------------------------------------------------- refusal events
class RefusalLimiter:
    """First `REFUSAL_BURST` refusals per peer per window are logged, the rest counted. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int, int]] = {}  # peer -> start, count, unlogged

    def allow(self, peer: str, now: float) -> tuple[bool, int]:
        """`(log it?, refusals not logged before this one)`; the count restarts once reported."""
        with self._lock:
            start, count, unlogged = self._windows.get(peer, (now, 0, 0))
            if now - start > REFUSAL_WINDOW_S:
                start, count = now, 0
            count += 1
            ok = count <= REFUSAL_BURST
            self._windows[peer] = (start, count, 0 if ok else unlogged + 1)
            if len(self._windows) > 10_000:
                self._windows.clear()
            return ok, unlogged if ok else 0


class _Refusals:
    """Turns refusals into `client_refused` events, rate-limited per peer."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.limiter = RefusalLimiter()

    def report(self, peer: str, **fields: Any) -> None:
        ok, suppressed = self.limiter.allow(peer, time.monotonic())
        if ok:
            extra = {"suppressed": suppressed} if suppressed else {}
            self.sink.emit("client_refused", level="warning", **fields, **extra)


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler thread with the daemon's allow-list; each refusal is reported.

    ZAP request frames (RFC 27): version, request id, domain, address, routing id, mechanism,
    credentials (for CURVE: the client's 32-byte public key)."""

    def __init__(self, ctx: zmq.Context, client_keys: frozenset[bytes], refusals: _Refusals) -> None:
        super().__init__(ctx, log=logging.getLogger("tvbod.zap"))
        self.certs[ZAP_DOMAIN] = {key: True for key in client_keys}
        self._refusals = refusals
        self._request: list[bytes] = []

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        self._request = msg  # requests are handled one at a time on the authenticator's thread
        try:
            await super().handle_zap_message(msg)
        finally:
            self._request = []

    def _send_zap_reply(self, request_id: bytes, status_code: bytes, status_text: bytes,
                        user_id: str = "anonymous") -> None:
        # The one place every verdict passes, whatever pyzmq's reason.
        super()._send_zap_reply(request_id, status_code, status_text, user_id)
        if status_code != b"200":
            msg = self._request
            address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else None
            key = msg[6] if len(msg) == 7 and msg[5] == b"CURVE" and len(msg[6]) == 32 else None
            self._refusals.report(
                f"zap:{address}", by="zap", reason=status_text.decode("utf-8", "replace"),
                address=address, public_key=z85.encode(key).decode() if key else None,
                mechanism=msg[5].decode("ascii", "replace") if len(msg) > 5 else None)


class _HandshakeWatch(threading.Thread):
    """Reads the socket monitor and reports handshakes that fail before ZAP is asked."""

    def __init__(self, monitor: zmq.Socket, refusals: _Refusals) -> None:
        super().__init__(name="tvbod-handshake-watch", daemon=True)
        self.monitor = monitor  # owned by this thread from start() on
        self.refusals = refusals
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if not self.monitor.poll(200):
                    continue
                event = recv_monitor_message(self.monitor)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    break
                endpoint = event["endpoint"].decode("utf-8", "replace")
                reason = _handshake_reason(event["event"], int(event["value"]))
                self.refusals.report(f"handshake:{endpoint}", by="handshake", reason=reason,
                                     address=None, public_key=None, endpoint=endpoint)
        except zmq.ZMQError:
            pass  # the context is going away
        finally:
            self.monitor.close(linger=0)


def _handshake_reason(event: int, value: int) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:  # value is an errno
        return HUNG_UP_REASON if value in _HUNG_UP else f"handshake failed ({os.strerror(value)})"
    return HANDSHAKE_REASONS.get(value, f"handshake failed (protocol error {value:#x})")


class SocketGuard:
    """The running ZAP authenticator and handshake watch of one CURVE server socket."""

    def __init__(self, authenticator: _Authenticator, watch: _HandshakeWatch) -> None:
        self.authenticator = authenticator
        self.watch = watch

    def stop(self) -> None:
        """Stop both threads (call after closing the guarded socket)."""
        self.watch.stopping.set()
        self.watch.join(timeout=2.0)
        self.authenticator.stop()


def guard_socket(ctx: zmq.Context, sock: zmq.Socket, curve: CurveConfig | None,
                 sink: Any) -> SocketGuard | None:
    """Make `sock` (not yet bound) a CURVE server that admits only `curve.client_keys`.

    Starts the ZAP authenticator on `ctx` (one per context: it binds `inproc://zeromq.zap.01`)
    and the handshake watch; returns them for `SocketGuard.stop`, or None (and changes nothing)
    when `curve` is None."""
    if curve is None:
        return None
    refusals = _Refusals(sink)
    authenticator = _Authenticator(ctx, curve.client_keys, refusals)
    authenticator.start()
    sock.curve_secretkey = curve.secret_key
    sock.curve_publickey = curve.public_key
    sock.curve_server = True
    sock.zap_domain = ZAP_DOMAIN.encode()
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler answering -> refuse everyone
    monitor_address = f"inproc://tvbod-handshake-watch-{id(sock)}"
    sock.monitor(monitor_address, _HANDSHAKE_EVENTS)
    monitor = ctx.socket(zmq.PAIR)
    monitor.connect(monitor_address)
    watch = _HandshakeWatch(monitor, refusals)
    watch.start()
    return SocketGuard(authenticator, watch)

