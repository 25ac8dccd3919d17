"""Reference client for tvbod protocol v1 (docs/protocol.md), with Lazy-Pirate retries.

A request that gets no reply within `timeout_s` is resent with the *same* request id on a fresh
socket, up to `retries` times; the daemon answers a repeated id from its reply cache, so a lost
reply never loses or duplicates a measurement. Imports only pyzmq and `tvbod.protocol` (adapters
import it as `plant_adapters.client`, which re-exports it).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from typing import Any, Callable

import zmq

from tvbod.errors import TvbodError
from tvbod.protocol import ProtocolError, decode_reply, encode, request_message


class DaemonError(TvbodError):
    """The daemon answered with an error reply; `code` is the protocol's stable error code."""

    def __init__(self, code: str, message: str, reply: dict) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = reply


class DaemonUnavailable(TvbodError):
    """No reply after every retry: the daemon is down or unreachable."""


class DaemonClient:
    """Talks to one plant of a tvbod daemon over a DEALER socket (one request in flight)."""

    def __init__(self, endpoint: str, plant: str, *, timeout_s: float = 2.0, retries: int = 10,
                 adapter: str = "tvbod-client", adapter_version: str = "1",
                 heartbeat_s: float | None = 30.0, context: zmq.Context | None = None,
                 curve: dict[str, bytes] | None = None,
                 on_silence: Callable[[int, int, float], None] | None = None) -> None:
        self.endpoint = endpoint
        self.plant = plant
        self.timeout_s = timeout_s
        self.retries = retries
        self.adapter = adapter
        self.adapter_version = adapter_version
        self.heartbeat_s = heartbeat_s
        self.curve = curve
        #: called after each unanswered try as `(tries left, tries in all, seconds per try)`
        self.on_silence = on_silence
        self.ctx = context or zmq.Context.instance()
        self._ids = itertools.count()
        self._prefix = f"{adapter}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._sock: zmq.Socket | None = None
        self._last_reply = 0.0
        self.reconnects = 0

    # ------------------------------------------------------------------ transport
    def _connect(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve:
            sock.curve_secretkey = self.curve["secret"]
            sock.curve_publickey = self.curve["public"]
            sock.curve_serverkey = self.curve["server"]
        sock.connect(self.endpoint)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def new_request_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def request(self, msg_type: str, request_id: str | None = None, **fields: Any) -> dict:
        """Send one request and return its reply map; retries with the same id on silence.

        Raises `DaemonError` for an error reply and `DaemonUnavailable` when every try timed out.
        """
        rid = request_id or self.new_request_id()
        payload = encode(request_message(msg_type, rid, **fields))
        for attempt in range(self.retries + 1):
            if self._sock is None:
                self._sock = self._connect()
            self._sock.send(payload)
            reply = self._await(rid)
            if reply is not None:
                self._last_reply = time.monotonic()
                if not reply["ok"]:
                    err = reply["error"]
                    raise DaemonError(err["code"], err["message"], reply)
                return reply
            # Lazy Pirate: the socket may hold a half-sent request; drop it and reconnect.
            self.close()
            self.reconnects += 1
            if self.on_silence is not None:
                self.on_silence(self.retries - attempt, self.retries + 1, self.timeout_s)
        raise DaemonUnavailable(
            f"no reply from {self.endpoint} to {msg_type} {rid!r} after {self.retries + 1} tries")

    def _await(self, rid: str) -> dict | None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                return None
            frames = self._sock.recv_multipart()
            try:
                reply = decode_reply(frames[-1])
            except ProtocolError:
                continue
            if reply.get("id") == rid:
                return reply
            # A late reply to an earlier attempt of another request: ignore it.

    def _heartbeat_if_idle(self) -> None:
        if self.heartbeat_s is not None and self._last_reply and \
                time.monotonic() - self._last_reply > self.heartbeat_s:
            self.ping()

    # ------------------------------------------------------------------ messages
    def hello(self) -> dict:
        return self.request("hello", plant=self.plant, adapter=self.adapter,
                            adapter_version=self.adapter_version)

    def ask(self, request_id: str | None = None) -> dict:
        self._heartbeat_if_idle()
        return self.request("ask", request_id, plant=self.plant, adapter=self.adapter)

    def tell(self, proposal_id: str, measurement: float | None, *, failed: bool = False,
             metadata: dict | None = None, request_id: str | None = None) -> dict:
        return self.request("tell", request_id, plant=self.plant, proposal_id=proposal_id,
                            measurement=measurement, failed=failed or None, metadata=metadata,
                            adapter=self.adapter)

    def best(self, plant: str | None = None) -> dict:
        """The recommended gains now (`best`, an optional v1 addition; docs/protocol.md)."""
        return self.request("best", plant=plant or self.plant)

    def observe(self, gains: dict, measurement: float, *, metadata: dict | None = None,
                request_id: str | None = None) -> dict:
        """Report a measurement taken elsewhere at `gains` (`observe`; docs/protocol.md)."""
        return self.request("observe", request_id, plant=self.plant, gains=gains,
                            measurement=measurement, metadata=metadata, adapter=self.adapter)

    def status(self, plant: str | None = None) -> dict:
        return self.request("status", plant=plant)

    def ping(self) -> dict:
        return self.request("ping")


def load_curve_keys(client_secret_file: str | os.PathLike,
                    server_public_file: str | os.PathLike) -> dict[str, bytes]:
    """CURVE keys for `DaemonClient(curve=...)` from two `tvbod keygen` files (Z85 keys).

    `client_secret_file` is the adapter's `NAME.key_secret` (its public key must be in the
    daemon's allow-list; the file must not be accessible by group or others), and
    `server_public_file` the daemon's public `NAME.key`. Raises `ValueError` naming the file."""
    import stat

    import zmq.auth

    def keys(path: str | os.PathLike) -> tuple[bytes | None, bytes | None]:
        try:
            return zmq.auth.load_certificate(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable CURVE key file ({exc})") from None

    public, secret = keys(client_secret_file)
    if not secret:
        raise ValueError(f"{client_secret_file} holds no secret-key: give the adapter's "
                         "NAME.key_secret (the public NAME.key goes to the daemon)")
    mode = stat.S_IMODE(os.stat(client_secret_file).st_mode)
    if mode & 0o077:
        raise ValueError(f"{client_secret_file} is accessible by group or others (mode {mode:04o}); "
                         f"run `chmod 600 {client_secret_file}`")
    server, _ = keys(server_public_file)
    for path, key in ((client_secret_file, public), (client_secret_file, secret),
                      (server_public_file, server)):
        if len(key) != 40:
            raise ValueError(f"{path}: a key is not 40 characters of Z85")
    if zmq.curve_public(secret) != public:
        raise ValueError(f"{client_secret_file}: the public-key does not belong to the secret-key")
    return {"secret": secret, "public": public, "server": server}
