"""One plant inside the daemon: its strategy, pending proposal, idempotency cache and requests.

Every state change is a journal record applied by one transition, `_apply`, both live and when
replaying the journal on start; it returns what it did (`Applied`). Live, a record is first
appended to the journal (fsync'd), then applied, then answered: a crash at any point either loses
an unacknowledged request (the client retries it) or replays an acknowledged one exactly (same
seeds, same order, same result). Restore, checkpoints and reconfiguration are in recovery.py,
what the plant reports (`hello`, `best`, `status`) in readouts.py, the measurement checks in
measurement_checks.py.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from tvbod.core import Strategy, make_strategy
from tvbod.protocol import (
    Ask, AskReply, ErrorCode, Hello, HelloReply, Observe, ObserveReply,
    ProtocolError, Tell, TellReply,
)
from tvbod.service.config import PlantConfig
from tvbod.service.events import PlantEventLog
from tvbod.service.measurement_checks import MeasurementChecks, observation_point
from tvbod.service.readouts import LatencyWindow, PlantReadouts
from tvbod.service.recovery import PlantRecovery, RestoreError
from tvbod.service.store import PlantStore, StorageError
from tvbod.service.transition import (
    RECENT_IDS, Applied, PlantTransitions, bounded_add, unpack_told,
)
from tvbod.service.workers import Prepared, prepare_strategy

__all__ = ["Applied", "LatencyWindow", "PlantRuntime", "RestoreError", "observation_point"]


def _digest(req: Ask | Tell | Observe) -> str:
    """What makes two requests with the same id the same request."""
    if isinstance(req, Tell):
        key = (req.type, req.plant, req.proposal_id, req.measurement, req.failed)
    elif isinstance(req, Observe):
        key = (req.type, req.plant, sorted(req.gains.items()), req.measurement)
    else:
        key = (req.type, req.plant)
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


class PlantRuntime(PlantTransitions, PlantRecovery, PlantReadouts, MeasurementChecks):
    """The daemon's view of one plant; the server calls `hello`, `ask`, `tell`, `status`, `tick`
    (and `restore`, `checkpoint`, `reconfigure` from recovery.py)."""

    def __init__(self, config: PlantConfig, store: PlantStore, events: PlantEventLog,
                 request_cache: int = 64, checkpoint_every: int = 50,
                 ask_time_budget_ms: float = 200.0, events_segment_bytes: int = 0,
                 events_keep_segments: int = 0) -> None:
        self.config = config
        self.name = config.name
        self.store = store
        self.events = events
        self.request_cache = request_cache
        self.checkpoint_every = checkpoint_every
        self.ask_time_budget_ms = ask_time_budget_ms
        self.events_segment_bytes = events_segment_bytes  # 0: never rotate events.jsonl
        self.events_keep_segments = events_keep_segments  # 0: keep every rotated segment
        self._rotation: tuple[str, list[str]] | str | None = None  # set by write_checkpoint
        self.strategy: Strategy = make_strategy(config.optimizer)
        self.proposal: dict[str, Any] | None = None  # {id, t, x, gains}
        self.proposal_deadline: float | None = None  # monotonic
        self.issued_at_t = 0  # proposal ids issued for the current step
        # The bounded tables below are plain dicts in insertion order (`bounded_add`).
        self.told: dict[str, int] = {}
        #: proposal id -> `pack_told(request digest, reply)` of recent tells, for retries the
        #: cache forgot
        self.told_replies: dict[str, bytes] = {}
        self.abandoned: dict[str, int] = {}
        self.cache: dict[str, tuple[str, dict]] = {}
        self.tells = 0
        self.failed_tells = 0
        self.records_since_checkpoint = 0
        self.adapter: str | None = None  # the adapter driving this plant (see `claim`)
        self.adapter_seen = 0.0  # monotonic time of its last request
        self.latency = {"ask": LatencyWindow(), "tell": LatencyWindow()}
        self._best: tuple[tuple, dict | None] | None = None  # (key, `best` fields) cache
        self._held: list[Applied] = []  # tells whose events wait for the journal's fsync
        #: the first step of the regime that had its `measurement_out_of_range` warning
        self.out_of_range_regime: int | None = None
        #: the step of the first model work timed since start (its one-off cost is no miss)
        self.first_timed_step: int | None = None

    # ------------------------------------------------------------------ requests
    def claim(self, adapter: str | None, request_id) -> None:
        """One adapter drives a plant at a time. Its claim lasts `proposal_timeout` seconds
        after its last request; a restarted adapter with the same name takes over at once.
        A request without an adapter name is served only while no claim is live."""
        now = time.monotonic()
        live = self.adapter is not None and now - self.adapter_seen < self.config.proposal_timeout
        if live and adapter != self.adapter:
            raise ProtocolError(
                ErrorCode.PLANT_CLAIMED,
                f"plant {self.name!r} is driven by adapter {self.adapter!r} (last request "
                f"{now - self.adapter_seen:.1f} s ago; its claim lapses after "
                f"{self.config.proposal_timeout:g} s of silence)", request_id)
        if adapter is None:
            return
        if adapter != self.adapter:
            self.events.emit("adapter_claimed", adapter=adapter, previous=self.adapter)
        self.adapter, self.adapter_seen = adapter, now

    def hello(self, req: Hello) -> HelloReply:
        self.claim(req.adapter, req.request_id)
        return HelloReply(req.request_id, **self.describe())

    def _cached(self, req: Ask | Tell | Observe) -> dict[str, Any] | None:
        hit = self.cache.get(str(req.request_id))
        if hit is None:
            return None
        digest, reply = hit
        if digest != _digest(req):
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"request id {req.request_id!r} was already used for a different "
                                "request; use a fresh id for every new request", req.request_id)
        return reply

    def ask(self, req: Ask) -> AskReply:
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return AskReply.from_body(req.request_id, cached)
        self.claim(req.adapter, req.request_id)
        if self.proposal is None:
            x = self.strategy.ask()
            t = self.strategy.t
            pid = f"{self.name}:{t}" + (f".{self.issued_at_t}" if self.issued_at_t else "")
            fields = self._commit({"kind": "proposal", "id": pid, "t": t, "x": x.tolist(),
                                   "rid": str(req.request_id), "digest": _digest(req)}).reply
            self.proposal_deadline = time.monotonic() + self.config.proposal_timeout
            self.events.emit("proposal", t=t, proposal_id=pid, gains=self.proposal["gains"])
            self._check_budget(t, time.perf_counter() - start)  # computed here, not prepared
        else:
            fields = self._proposal_fields()
            bounded_add(self.cache, str(req.request_id), (_digest(req), fields),
                         self.request_cache)
        self.latency["ask"].add(time.perf_counter() - start)
        return AskReply.from_body(req.request_id, fields)

    def tell(self, req: Tell) -> TellReply:
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return TellReply.from_body(req.request_id, cached, duplicate=True)
        self.claim(req.adapter, req.request_id)
        pid = req.proposal_id
        if self.proposal is None or pid != self.proposal["id"]:
            earlier = self.told_replies.get(pid)
            digest, reply = unpack_told(earlier) if earlier is not None else (None, None)
            if digest == _digest(req):
                # A resend whose reply left the request cache: the journal knows its outcome.
                return TellReply.from_body(req.request_id, reply, duplicate=True)
            if pid in self.told:
                raise ProtocolError(ErrorCode.DUPLICATE_TELL,
                                    f"proposal {pid!r} was already told (step {self.told[pid]})",
                                    req.request_id)
            if pid in self.abandoned:
                raise ProtocolError(ErrorCode.STALE_PROPOSAL,
                                    f"proposal {pid!r} was abandoned after its timeout; ask again",
                                    req.request_id)
            step = self._issued_step(pid)
            if step is not None:
                raise ProtocolError(
                    ErrorCode.STALE_PROPOSAL,
                    f"proposal {pid!r} was issued for step {step}; the plant is at step "
                    f"{self.strategy.t} and remembers the outcomes of its last {RECENT_IDS} "
                    "proposals only; ask for a new proposal", req.request_id)
            raise ProtocolError(ErrorCode.UNKNOWN_PROPOSAL,
                                f"proposal {pid!r} is not the pending proposal of {self.name!r}"
                                + (f" (pending: {self.proposal['id']!r})" if self.proposal else ""),
                                req.request_id)
        x = np.asarray(self.proposal["x"])
        if req.failed:
            y = self._failure_value(x, req.request_id)
        else:
            y = float(req.measurement)
            self._guard_measurement(y, req.request_id)
        t = self.proposal["t"]
        applied = self._commit({
            "kind": "tell", "id": pid, "t": t, "x": self.proposal["x"], "y": y,
            "failed": req.failed, "measurement": req.measurement, "metadata": req.metadata,
            "rid": str(req.request_id), "digest": _digest(req)})
        self._held.append(applied)
        self.latency["tell"].add(time.perf_counter() - start)
        return TellReply.from_body(req.request_id, applied.reply, duplicate=False)

    def _issued_step(self, pid: str) -> int | None:
        """The step of a proposal id this plant issued before its current step (ids are
        `NAME:t` or `NAME:t.k`, tvbod/service/plant.py `ask`), else None."""
        prefix = f"{self.name}:"
        if not isinstance(pid, str) or not pid.startswith(prefix):
            return None
        step, _, again = pid[len(prefix):].partition(".")
        if not step.isdigit() or (again and not again.isdigit()):
            return None
        return int(step) if 1 <= int(step) < self.strategy.t else None

    def observe(self, req: Observe) -> ObserveReply:
        """A measurement taken elsewhere: journaled, applied and evented like a tell. It is a
        step: it gets the plant's next `t` (docs/protocol.md, observe)."""
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return ObserveReply.from_body(req.request_id, cached, duplicate=True)
        self.claim(req.adapter, req.request_id)
        x = self.check_observation(req.gains, req.request_id)
        applied = self.record_observation(x, req.measurement, req.metadata, str(req.request_id),
                                          _digest(req))
        self.latency["tell"].add(time.perf_counter() - start)
        return ObserveReply.from_body(req.request_id, applied.reply, duplicate=False)

    def record_observation(self, x: np.ndarray, y: float, metadata: dict, rid: str,
                           digest: str) -> Applied:
        """Journal and apply one observation at the checked point `x` (`observe`, `tvbod
        import`); refused while a proposal is pending, whose step it would take."""
        if self.proposal is not None:
            raise ProtocolError(
                ErrorCode.PROPOSAL_PENDING,
                f"plant {self.name!r} has proposal {self.proposal['id']!r} pending; tell it (or "
                f"let it time out after {self.config.proposal_timeout:g} s) before observing", rid)
        self._guard_measurement(float(y), rid)
        t = self.strategy.t
        applied = self._commit({
            "kind": "observe", "id": f"{self.name}:{t}.observed", "t": t, "x": x.tolist(),
            "y": float(y), "failed": False, "measurement": float(y), "metadata": metadata,
            "rid": rid, "digest": digest})
        self._held.append(applied)
        return applied

    def record_tell(self, step: dict[str, Any], rid: str) -> Applied:
        """Journal and apply a recorded step as the proposal and tell it was (`tvbod repair`
        rebuilding a plant from its history): `step` has the `measurement` event's `t`,
        `proposal_id`, `x`, `measurement` (the value told), `failed`, `raw_measurement` and
        `metadata`. The tell is guarded like a live one."""
        y = float(step["measurement"])
        self._guard_measurement(y, rid)
        pid, t, x = step["proposal_id"], int(step["t"]), list(step["x"])
        self._commit({"kind": "proposal", "id": pid, "t": t, "x": x, "rid": f"{rid}-ask",
                      "digest": rid})
        applied = self._commit({
            "kind": "tell", "id": pid, "t": t, "x": x, "y": y, "failed": bool(step["failed"]),
            "measurement": step.get("raw_measurement", y), "metadata": step.get("metadata") or {},
            "rid": rid, "digest": rid})
        self._held.append(applied)
        return applied

    def synced(self) -> None:
        """The journal was fsync'd: write the event lines of the tells it made durable.

        Held back until now, so that a power cut cannot leave a `measurement` line (the history
        replay reads) for a tell whose journal record it took away, i.e. one never acknowledged.
        """
        held, self._held = self._held, []
        for applied in held:
            self._emit_tell_events(applied)

    # ------------------------------------------------------------------ housekeeping
    def tick(self, now: float) -> None:
        """Abandon a proposal whose timeout passed (journaled, so a restart agrees)."""
        if self.proposal is None or self.proposal_deadline is None or now < self.proposal_deadline:
            return
        pid, t = self.proposal["id"], self.proposal["t"]
        try:
            self._commit({"kind": "abandon", "id": pid, "t": t})
        except StorageError:
            self.proposal_deadline = now + 1.0  # storage is down; try again later
            return
        self.proposal_deadline = None
        self.events.emit("proposal_abandoned", t=t, proposal_id=pid,
                         timeout_s=self.config.proposal_timeout)

    def needs_preparation(self, propose: bool) -> bool:
        """True when a job has work: the deferred refit, or (`propose`) the next proposal."""
        if propose:
            return self.proposal is None and not self.strategy.proposal_ready
        return not self.strategy.settled

    def propose_ahead(self) -> None:
        """The next proposal computed before the ask comes (the loop's idle time, server.py): the
        tell's deferred work and the proposal only (no recommendation, no packed factor: this is
        for plants whose model work is light). An error is reported as a job's would be; the ask
        then computes the proposal again and answers the error."""
        start = time.perf_counter()
        try:
            self.strategy.ask()
        except Exception as exc:  # noqa: BLE001 - the loop must go on
            self.prepared(Prepared(self.strategy.t, time.perf_counter() - start, error=exc))
            return
        self._check_budget(self.strategy.t, time.perf_counter() - start)

    def prepare(self, propose: bool) -> tuple[tuple, dict | None]:
        """The next step's model work, on a worker thread (tvbod/service/workers.py): the tell's
        deferred refit (`settle`), with `propose` the next proposal, and the recommendation;
        returns the `best` cache entry. Deterministic, so it changes no outcome, only when the
        work is done: a proposal is a pure function of the state and the step's seed."""
        return self._best_entry(prepare_strategy(self.strategy, propose))

    def adopt(self, strategy: Strategy, rec) -> tuple[tuple, dict | None]:
        """A process worker's job, back on the loop thread: `strategy` is this plant's strategy
        after `prepare_strategy` ran on a copy of it (pickled there and back, bit for bit), `rec`
        the recommendation it computed; returns the `best` cache entry as `prepare` does."""
        self.strategy = strategy
        return self._best_entry(rec)

    def prepared(self, outcome) -> None:
        """A job's result, back on the loop thread: the `best` cache, `slow_proposal`, errors."""
        if outcome.error is not None:
            self.events.emit("internal_error", level="error", where="prepare",
                             error=repr(outcome.error))
            return
        self._best = outcome.best
        self._check_budget(outcome.t, outcome.seconds)

    def _check_budget(self, t: int, seconds: float) -> None:
        """`slow_proposal` when computing step `t`'s proposal took longer than the daemon file's
        `ask_time_budget_ms` (in an ask, a model job or the loop's idle time alike); not for the
        first step whose work is timed after a start (a restored plant may settle, then propose,
        for it), whose one-off costs (imports, caches, a restored state's first factorization) say
        nothing of the budget."""
        ms = seconds * 1e3
        if self.first_timed_step is None:
            self.first_timed_step = t
        if ms > self.ask_time_budget_ms and t != self.first_timed_step:
            self.events.emit("slow_proposal", level="warning", t=t, ms=round(ms, 1),
                             budget_ms=self.ask_time_budget_ms)

    def close(self) -> None:
        self.store.close()
        self.events.close()
