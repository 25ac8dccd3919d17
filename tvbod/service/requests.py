"""Requests: how the daemon answers one multipart message (mixed into `Server`).

`_answer` decodes the request, dispatches it through a plain dict of handlers and turns every
exception into an error reply: this is the one place errors become codes (a `ProtocolError`
carries its own; a `StorageError` is `storage_unavailable`; anything else `internal`). A request
for a plant whose next step a worker prepares (tvbod/service/workers.py) is parked and answered
when the job is collected, so one plant's refit never delays another plant's reply.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
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
#: Requests held per plant while its model job runs; beyond, `overloaded` (retryable).
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


class RequestHandling:
    """`Server`'s request half: the handlers of `Server._handlers` and the one error mapping."""

    def _handle(self, frames: list[bytes]) -> list[bytes] | None:
        """Turn one multipart message into reply frames (None: no reply now, or none at all)."""
        self.messages += 1
        peer = frames[0] if frames else b""
        try:
            env = split_envelope(frames)
        except ProtocolError as exc:
            self.metrics.message("invalid")
            self._client_error(peer, exc)
            return [peer, encode(exc.to_reply())] if peer else None
        return self._answer(env, peer)

    def _answer(self, env, peer: bytes, req=None) -> list[bytes] | None:
        """Decode (unless `req` is the parked request) and dispatch; every failure becomes an
        error reply. A request for a plant whose model work runs is parked (`_park`).

        The one place errors become codes: a `ProtocolError` carries its own (the request's id
        when the raiser gave none), a `StorageError` is `storage_unavailable`, anything else
        `internal`."""
        try:
            if req is None:
                try:
                    req = decode_request(env.payload, self.config.max_message_bytes)
                finally:
                    self.metrics.message(req.type if req is not None else "invalid")
                if self._fault_check is not None:
                    self._fault_check()
                if self._park(env, peer, req):
                    return None
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

    # ------------------------------------------------------------------ parking (workers.py)
    def _park(self, env, peer: bytes, req) -> bool:
        """Hold a request that must read a plant whose job runs (or behind one already held,
        keeping each plant's arrival order); True if held. An `ask` whose proposal is not
        computed starts the job that computes it, and waits. A resend of a held request (same id
        and type: a client retrying on silence) takes the held one's place, so retries during a
        long job never fill the plant's queue. A `status` of all plants waits only for the plants
        busy when it arrived (the others report their newest state)."""
        name = getattr(req, "plant", None)
        if name is not None and name in self.plants:
            if not self._parked.get(name):
                self._proposal_first(name, req)
            if self._workers.busy(name) or self._parked.get(name):
                held = self._parked.setdefault(name, deque())
                for i, (_env, _peer, other) in enumerate(held):
                    if other.request_id == req.request_id and other.type == req.type:
                        held[i] = (env, peer, req)  # a resend (a retrying client's new socket):
                        return True  # answered once, to the newest sender, in the first's place
                if len(held) >= _PARKED_PER_PLANT:
                    raise ProtocolError(ErrorCode.OVERLOADED,
                                        f"plant {name!r} is preparing its next step and "
                                        f"{len(held)} requests wait for it; retry shortly")
                held.append((env, peer, req))
                return True
            return False
        if req.type == "status":
            waiting = {n for n in self.plants if self._workers.busy(n)}
            if waiting:
                self._parked_status.append((waiting, env, peer, req))
                return True
        return False

    def _proposal_first(self, name: str, req) -> bool:
        """Whether `req` is an ask whose plant has no proposal computed: then the job that
        computes it is started (off the loop), and the ask must wait for it."""
        return req.type == "ask" and self._workers.start(self.plants[name])

    def _resume(self, finished: list[str]) -> list[list[bytes]]:
        """Answer what the plants in `finished` held, in order, until one is busy again."""
        replies = []
        for name in finished:
            held = self._parked.get(name)
            while held and not self._workers.busy(name):
                if self._proposal_first(name, held[0][2]):
                    break  # the ask waits for the job that computes its proposal
                frames = self._answer(*held.popleft())
                if frames is not None:
                    replies.append(frames)
            if held is not None and not held:
                del self._parked[name]
        if self._parked_status:
            still = []
            for waiting, env, peer, req in self._parked_status:
                waiting = {n for n in waiting if self._workers.busy(n)}
                if waiting:
                    still.append((waiting, env, peer, req))
                else:
                    replies.append(self._answer(env, peer, req))
            self._parked_status = still
        return replies

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
        if plant is None and req.plant in self.quarantined:
            raise ProtocolError(ErrorCode.PLANT_UNAVAILABLE,
                                f"plant {req.plant!r} is quarantined: "
                                f"{self.quarantined[req.plant]}", req.request_id)
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
        return self._stepped(req, self._timed(req, self._plant(req).tell), propose=True)

    def _observe(self, req) -> Reply:
        return self._stepped(req, self._timed(req, self._plant(req).observe), propose=False)

    def _stepped(self, req, reply: Reply, propose: bool) -> Reply:
        """After a measurement was applied: a worker runs its refit and (after a tell, when the
        adapter's ask comes next) the next proposal; a plant no worker takes (workers.py
        `light_model`) is prepared on the loop when it is idle (`Server._prepare_when_idle`)."""
        plant = self.plants[req.plant]
        self._workers.start(plant, propose)
        if propose and not self._workers.busy(plant.name) and plant.needs_preparation(True):
            self._idle_prep[plant.name] = None
        return reply

    def _best(self, req) -> Reply:
        return self._plant(req).best(req)

    def _status(self, req: Status) -> Reply:
        plants = [self._plant(req)] if req.plant is not None else list(self.plants.values())
        return StatusReply(req.request_id,
                           plants=[p.status(True, self._workers.busy(p.name)) for p in plants],
                           daemon={"version": __version__, "pid": os.getpid(),
                                   "uptime_s": round(time.time() - self.started, 3),
                                   "messages": self.messages,
                                   "quarantined": dict(self.quarantined)})

    def _ping(self, req) -> Reply:
        return PingReply(req.request_id, pong=True, time=time.time())

