"""Requests: how the daemon answers one multipart message (mixed into `Server`).

`_handle` decodes the request, dispatches it through a plain dict of handlers and turns every
exception into an error reply: this is the one place errors become codes (a `ProtocolError`
carries its own; a `StorageError` is `storage_unavailable`; anything else `internal`).
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any, Callable

from tvbod import __version__
from tvbod.protocol import (
    ErrorCode, Hello, PingReply, ProtocolError, Reply, Status, StatusReply, decode_request, encode,
    error_reply, split_envelope,
)
from tvbod.service.plant import PlantRuntime
from tvbod.service.store import StorageError

#: client_error events per peer per window before they are only counted.
_CLIENT_ERROR_BURST = 20
_CLIENT_ERROR_WINDOW_S = 10.0


class ClientErrorLimiter:
    """Log the first few client errors of a peer per window, count the rest (fuzzers are loud)."""

    def __init__(self) -> None:
        self.windows: dict[bytes, tuple[float, int, int]] = {}

    def allow(self, peer: bytes, now: float) -> tuple[bool, int]:
        """`(log this one?, errors suppressed in the peer's previous window, to report now)`."""
        start, count, dropped = self.windows.get(peer, (now, 0, 0))
        reported = 0
        if now - start > _CLIENT_ERROR_WINDOW_S:
            reported, start, count, dropped = dropped, now, 0, 0
        count += 1
        ok = count <= _CLIENT_ERROR_BURST
        self.windows[peer] = (start, count, dropped + (not ok))
        if len(self.windows) > 10_000:
            self.windows.clear()
        return ok, reported


class RequestHandling:
    """`Server`'s request half: the handlers of `Server._handlers` and the one error mapping."""

    def _handle(self, frames: list[bytes]) -> list[bytes] | None:
        """Turn one multipart message into reply frames; every failure becomes an error reply.

        The one place errors become codes: a `ProtocolError` carries its own (the request's id
        when the raiser gave none), a `StorageError` is `storage_unavailable`, anything else
        `internal`."""
        self.messages += 1
        peer = frames[0] if frames else b""
        try:
            env = split_envelope(frames)
        except ProtocolError as exc:
            self.metrics.message("invalid")
            self._client_error(peer, exc)
            return [peer, encode(exc.to_reply())] if peer else None
        req = None
        try:
            try:
                req = decode_request(env.payload, self.config.max_message_bytes)
            finally:
                self.metrics.message(req.type if req is not None else "invalid")
            if self._fault_check is not None:
                self._fault_check()
            reply = self._handlers[req.type](req).to_message()
        except (ProtocolError, StorageError) as exc:
            if isinstance(exc, StorageError):
                exc = ProtocolError(ErrorCode.STORAGE_UNAVAILABLE,
                                    f"the daemon cannot persist to its state directory: {exc}")
            if exc.request_id is None and req is not None:
                exc.request_id = req.request_id
            self._client_error(peer, exc)
            reply = exc.to_reply()
        except Exception as exc:  # noqa: BLE001 - the one place internal errors become replies
            self.sink.emit("internal_error", level="error", error=repr(exc),
                           traceback=traceback.format_exc(limit=8))
            rid = req.request_id if req is not None else None
            self.metrics.client_error(str(ErrorCode.INTERNAL))
            reply = error_reply(rid, ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}")
        return env.reply_frames(encode(reply))

    def _client_error(self, peer: bytes, exc: ProtocolError) -> None:
        self.metrics.client_error(str(exc.code))
        ok, dropped = self._errors.allow(peer, time.monotonic())
        if dropped:
            self.sink.emit("client_error", level="warning", peer=peer.hex(), code="suppressed",
                           suppressed=dropped)
        if ok:
            self.sink.emit("client_error", peer=peer.hex(), code=str(exc.code),
                           message=exc.message, request_id=exc.request_id)

    def _plant(self, req) -> PlantRuntime:
        plant = self.plants.get(req.plant)
        if plant is None:
            raise ProtocolError(ErrorCode.UNKNOWN_PLANT,
                                f"no plant named {req.plant!r}; this daemon hosts "
                                f"{', '.join(sorted(self.plants)) or 'none'}", req.request_id)
        return plant

    def _timed(self, req, handler: Callable[[Any], Reply]) -> Reply:
        """`handler(req)`, its service time recorded for the metrics (the plant-changing
        requests: ask, tell, observe)."""
        start = time.perf_counter()
        try:
            return handler(req)
        finally:
            self.metrics.request(req.type, time.perf_counter() - start)

    def _hello(self, req: Hello) -> Reply:
        return self._plant(req).hello(req)

    def _ask(self, req) -> Reply:
        return self._timed(req, self._plant(req).ask)

    def _tell(self, req) -> Reply:
        return self._timed(req, self._plant(req).tell)

    def _observe(self, req) -> Reply:
        return self._timed(req, self._plant(req).observe)

    def _best(self, req) -> Reply:
        return self._plant(req).best(req)

    def _status(self, req: Status) -> Reply:
        plants = [self._plant(req)] if req.plant is not None else list(self.plants.values())
        return StatusReply(req.request_id, plants=[p.status(with_best=True) for p in plants],
                           daemon={"version": __version__, "pid": os.getpid(),
                                   "uptime_s": round(time.time() - self.started, 3),
                                   "messages": self.messages})

    def _ping(self, req) -> Reply:
        return PingReply(req.request_id, pong=True, time=time.time())

