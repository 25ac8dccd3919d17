"""Requests: how the daemon answers one multipart message.

`RequestHandler.handle` decodes a message, parks it when its plant's job runs (answered when the
job is collected, so one plant's refit never delays another plant's reply), else dispatches it
through `HANDLERS`, a plain dict of functions that receive the `PlantHost` explicitly (Circus's
commands). `error_reply` is the one place errors become codes: a `ProtocolError` carries its
own, a `StorageError` is `storage_unavailable`, anything else `internal`.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
from typing import Any, Callable

from tvbod import __version__
from tvbod.protocol import (
    ErrorCode, PingReply, ProtocolError, Reply, Status, StatusReply, decode_request, encode,
    error_reply, split_envelope,
)
from tvbod.service.hosted import PlantHost
from tvbod.service.store import StorageError

#: client_error events per peer per window before they are only counted.
_CLIENT_ERROR_BURST = 20
_CLIENT_ERROR_WINDOW_S = 10.0
#: Requests parked per plant while its job runs; beyond, `overloaded` (retryable).
_PARKED_PER_PLANT = 256


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


def _timed(host: PlantHost, req, handler: Callable[[Any], Reply]) -> Reply:
    """`handler(req)`, its service time recorded for the metrics (the plant-changing requests:
    ask, tell, observe)."""
    start = time.perf_counter()
    try:
        return handler(req)
    finally:
        host.metrics.request(req.type, time.perf_counter() - start)


def _status(host: PlantHost, req: Status) -> Reply:
    plants = [host.plant(req)] if req.plant is not None else list(host.plants.values())
    return StatusReply(req.request_id,
                       plants=[p.status(True, host.workers.busy(p.name)) for p in plants],
                       daemon={"version": __version__, "pid": os.getpid(),
                               "uptime_s": round(time.time() - host.started, 3),
                               "messages": host.messages, "quarantined": dict(host.quarantined)})


#: request type -> handler(host, request) -> reply
HANDLERS: dict[str, Callable[[PlantHost, Any], Reply]] = {
    "hello": lambda host, req: host.plant(req).hello(req),
    "ask": lambda host, req: _timed(host, req, host.plant(req).ask),
    "tell": lambda host, req: _timed(host, req, host.plant(req).tell),
    "observe": lambda host, req: _timed(host, req, host.plant(req).observe),
    "best": lambda host, req: host.plant(req).readouts.best(req),
    "status": _status,
    "ping": lambda host, req: PingReply(req.request_id, pong=True, time=time.time()),
}
#: After these (a measurement applied), the plant's job runs: its refit and, after a tell (the
#: adapter's ask comes next), the next proposal; after an observation another usually follows.
_STEPPED = {"tell": True, "observe": False}


class RequestHandler:
    """Answers messages for the plants of a `PlantHost`; parks the requests of busy plants.

    `idle_proposals`: plants (in order) whose next proposal the loop computes when no message
    waits (`Server`), for plants no worker takes (workers.py `light_model`)."""

    def __init__(self, host: PlantHost, fault_check: Callable[[], None] | None = None) -> None:
        self.host = host
        self.fault_check = fault_check
        self.idle_proposals: dict[str, None] = {}
        self._errors = ClientErrorLimiter()
        #: requests parked while their plant's job runs, per plant / `status` of all plants
        self._parked: dict[str, deque] = {}
        self._parked_status: list[tuple] = []

    def handle(self, frames: list[bytes]) -> list[bytes] | None:
        """Turn one multipart message into reply frames (None: no reply now, or none at all)."""
        self.host.messages += 1
        peer = frames[0] if frames else b""
        try:
            env = split_envelope(frames)
        except ProtocolError as exc:
            self.host.metrics.message("invalid")
            self._client_error(peer, exc)
            return [peer, encode(exc.to_reply())] if peer else None
        req = None
        try:
            try:
                req = decode_request(env.payload, self.host.config.max_message_bytes)
            finally:
                self.host.metrics.message(req.type if req is not None else "invalid")
            if self.fault_check is not None:
                self.fault_check()
            if self._park(env, peer, req):
                return None
        except Exception as exc:  # noqa: BLE001 - becomes an error reply in `error_reply`
            return env.reply_frames(encode(self.error_reply(peer, req, exc)))
        return self.reply(env, peer, req)

    def reply(self, env, peer: bytes, req) -> list[bytes]:
        """Dispatch a decoded request (fresh or parked); every failure becomes an error reply."""
        try:
            reply = HANDLERS[req.type](self.host, req)
            if req.type in _STEPPED:
                self._stepped(req, _STEPPED[req.type])
            message = reply.to_message()
        except Exception as exc:  # noqa: BLE001 - becomes an error reply in `error_reply`
            message = self.error_reply(peer, req, exc)
        return env.reply_frames(encode(message))

    def error_reply(self, peer: bytes, req, exc: Exception) -> dict:
        """The one place errors become codes: a `ProtocolError` carries its own (the request's
        id when the raiser gave none), a `StorageError` is `storage_unavailable`, anything else
        `internal` (logged with its traceback)."""
        if isinstance(exc, StorageError):
            exc = ProtocolError(ErrorCode.STORAGE_UNAVAILABLE,
                                f"the daemon cannot persist to its state directory: {exc}")
        if isinstance(exc, ProtocolError):
            if exc.request_id is None and req is not None:
                exc.request_id = req.request_id
            self._client_error(peer, exc)
            return exc.to_reply()
        self.host.sink.emit("internal_error", level="error", error=repr(exc),
                            traceback=traceback.format_exc(limit=8))
        self.host.metrics.client_error(str(ErrorCode.INTERNAL))
        rid = req.request_id if req is not None else None
        return error_reply(rid, ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}")

    def _stepped(self, req, propose: bool) -> None:
        """After a measurement was applied: a worker runs the plant's job; a plant no worker
        takes (workers.py `light_model`) gets its proposal on the loop when it is idle."""
        plant, workers = self.host.plants[req.plant], self.host.workers
        workers.start(plant, propose)
        if propose and not workers.busy(plant.name) and plant.has_work(True):
            self.idle_proposals[plant.name] = None

    # ------------------------------------------------------------------ parking (workers.py)
    def _park(self, env, peer: bytes, req) -> bool:
        """Park a request that must read a plant whose job runs (or behind one already parked,
        keeping each plant's arrival order); True if parked. An `ask` whose proposal is not
        computed starts the job that computes it, and waits. A resend of a parked request (same
        id and type: a client retrying on silence) takes the parked one's place, so retries
        during a long job never fill the plant's queue. A `status` of all plants waits only for
        the plants busy when it arrived (the others report their newest state)."""
        host, name = self.host, getattr(req, "plant", None)
        if name is not None and name in host.plants:
            if not self._parked.get(name):
                self._proposal_first(name, req)
            if not (host.workers.busy(name) or self._parked.get(name)):
                return False
            parked = self._parked.setdefault(name, deque())
            for i, (_env, _peer, other) in enumerate(parked):
                if other.request_id == req.request_id and other.type == req.type:
                    parked[i] = (env, peer, req)  # a resend (a retrying client's new socket):
                    return True  # answered once, to the newest sender, in the first's place
            if len(parked) >= _PARKED_PER_PLANT:
                raise ProtocolError(ErrorCode.OVERLOADED,
                                    f"plant {name!r} is preparing its next step and "
                                    f"{len(parked)} requests wait for it; retry shortly")
            parked.append((env, peer, req))
            return True
        if req.type == "status":
            waiting = {n for n in host.plants if host.workers.busy(n)}
            if waiting:
                self._parked_status.append((waiting, env, peer, req))
                return True
        return False

    def _proposal_first(self, name: str, req) -> bool:
        """Whether `req` is an ask whose plant has no proposal computed: then the job that
        computes it is started (off the loop), and the ask must wait for it."""
        return req.type == "ask" and self.host.workers.start(self.host.plants[name])

    def resume(self, finished: list[str]) -> list[list[bytes]]:
        """Answer what the plants in `finished` parked, in order, until one is busy again."""
        replies, busy = [], self.host.workers.busy
        for name in finished:
            parked = self._parked.get(name)
            while parked and not busy(name):
                if self._proposal_first(name, parked[0][2]):
                    break  # the ask waits for the job that computes its proposal
                replies.append(self.reply(*parked.popleft()))
            if parked is not None and not parked:
                del self._parked[name]
        still = []
        for waiting, env, peer, req in self._parked_status:
            waiting = {n for n in waiting if busy(n)}
            if waiting:
                still.append((waiting, env, peer, req))
            else:
                replies.append(self.reply(env, peer, req))
        self._parked_status = still
        return replies

    @property
    def parked_status(self) -> bool:
        """True while a `status` of all plants waits for busy plants."""
        return bool(self._parked_status)

    def _client_error(self, peer: bytes, exc: ProtocolError) -> None:
        self.host.metrics.client_error(str(exc.code))
        ok, dropped = self._errors.allow(peer, time.monotonic())
        if dropped:
            self.host.sink.emit("client_error", level="warning", peer=peer.hex(),
                                code="suppressed", suppressed=dropped)
        if ok:
            self.host.sink.emit("client_error", peer=peer.hex(), code=str(exc.code),
                                message=exc.message, request_id=exc.request_id)
