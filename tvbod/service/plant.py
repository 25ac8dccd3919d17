"""One plant inside the daemon, composed of explicit collaborators.

- `state` (`PlantState`, tvbod/service/transition.py): configuration, strategy, pending proposal
  and the protocol's bookkeeping; changed only by `apply(state, record)`, the one transition,
  live and on replay.
- `store` (its journal and checkpoints on disk), `checkpointer` (tvbod/service/checkpoints.py),
  `events` and `tell_events` (tvbod/service/tell_events.py), `readouts` (`hello`, `best`,
  `status`; tvbod/service/readouts.py), `budget` (`slow_proposal`), `claim` (the adapter
  driving it; claims.py). A reload switches its settings (live_reload.py).

A request that changes the plant is *committed*: its record is appended to the journal, applied,
and answered once the server's group commit fsync'd the journal: a crash at any point either
loses an unacknowledged request (the client retries it) or replays an acknowledged one exactly
(same seeds, same order, same result). The words of this module are named in transition.py's
glossary.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tvbod.core import Strategy, make_strategy
from tvbod.protocol import (
    Ask, AskReply, ErrorCode, Hello, HelloReply, Observe, ObserveReply, ProtocolError, Tell,
    TellReply,
)
from tvbod.service import recovery
from tvbod.service.checkpoints import CheckpointPolicy, Checkpointer, checkpoint_dict
from tvbod.service.claims import AdapterClaim
from tvbod.service.config import PlantConfig
from tvbod.service.events import PlantEventLog
from tvbod.service.idempotency import cached_reply, proposal_id, refuse_tell, request_digest
from tvbod.service.measurement_checks import failure_value, guard_measurement, observation_point
from tvbod.service.readouts import PlantReadouts, ProposalBudget
from tvbod.service.store import PlantStore, StorageError
from tvbod.service.tell_events import TellEvents
from tvbod.service.transition import Applied, PlantState, apply, replay_divergence
from tvbod.service.workers import JobResult, run_job


class PlantRuntime:
    """The daemon's view of one plant: requests (`hello`, `ask`, `tell`, `observe`), the
    housekeeping the server calls (`tick`, `synced`, checkpoints) and the job
    interface the model workers use (`has_work`, `run_job`, `adopt`, `job_done`)."""

    def __init__(self, config: PlantConfig, store: PlantStore, events: PlantEventLog,
                 request_cache: int = 64, checkpoint_every: int = 50,
                 ask_time_budget_ms: float = 200.0, events_segment_bytes: int = 0,
                 events_keep_segments: int = 0) -> None:
        self.state = PlantState(config, make_strategy(config.optimizer), request_cache)
        self.name = config.name
        self.store, self.events = store, events
        self.checkpointer = Checkpointer(store, events, CheckpointPolicy(
            checkpoint_every, events_segment_bytes, events_keep_segments))
        self.tell_events = TellEvents(events)
        self.readouts = PlantReadouts(self.state)
        self.budget = ProposalBudget(events, ask_time_budget_ms)
        self.proposal_deadline: float | None = None  # monotonic
        self.claim = AdapterClaim(self.state, events)
        self._unsynced: list[Applied] = []  # tells whose events wait for the journal's fsync

    @property
    def config(self) -> PlantConfig:
        return self.state.config

    @property
    def strategy(self) -> Strategy:
        return self.state.strategy

    @property
    def proposal(self) -> dict[str, Any] | None:
        return self.state.proposal

    # ------------------------------------------------------------------ requests
    def hello(self, req: Hello) -> HelloReply:
        self.claim.check(req.adapter, req.request_id)
        return HelloReply(req.request_id, **self.readouts.describe())

    def ask(self, req: Ask) -> AskReply:
        start = time.perf_counter()
        cached = cached_reply(self.state, req)
        if cached is not None:
            return AskReply.from_body(req.request_id, cached)
        self.claim.check(req.adapter, req.request_id)
        if self.proposal is None:
            x, t = self.strategy.ask(), self.strategy.t  # computed here, unless a job did
            pid = proposal_id(self.state)
            fields = self._commit({"kind": "proposal", "id": pid, "t": t, "x": x.tolist(),
                                   "rid": str(req.request_id),
                                   "digest": request_digest(req)}).reply
            self.proposal_deadline = time.monotonic() + self.config.proposal_timeout
            self.events.emit("proposal", t=t, proposal_id=pid, gains=fields["gains"])
            self.budget.check(t, time.perf_counter() - start)
        else:
            fields = self.state.proposal_fields()
            self.state.remember(str(req.request_id), request_digest(req), fields)
        self.readouts.latency["ask"].add(time.perf_counter() - start)
        return AskReply.from_body(req.request_id, fields)

    def tell(self, req: Tell) -> TellReply:
        start = time.perf_counter()
        cached = cached_reply(self.state, req)
        if cached is not None:
            return TellReply.from_body(req.request_id, cached, duplicate=True)
        self.claim.check(req.adapter, req.request_id)
        proposal = self.proposal
        if proposal is None or req.proposal_id != proposal["id"]:
            return TellReply.from_body(req.request_id, refuse_tell(self.state, req),
                                       duplicate=True)
        x = np.asarray(proposal["x"])
        if req.failed:
            y = failure_value(self.config, self.strategy, x, req.request_id)
        else:
            y = float(req.measurement)
            guard_measurement(self.config, self.strategy, y, req.request_id)
        applied = self._commit({
            "kind": "tell", "id": req.proposal_id, "t": proposal["t"], "x": proposal["x"],
            "y": y, "failed": req.failed, "measurement": req.measurement,
            "metadata": req.metadata, "rid": str(req.request_id),
            "digest": request_digest(req)})
        self.readouts.latency["tell"].add(time.perf_counter() - start)
        return TellReply.from_body(req.request_id, applied.reply, duplicate=False)

    def observe(self, req: Observe) -> ObserveReply:
        """A measurement taken elsewhere: journaled, applied and evented like a tell. It is a
        step: it gets the plant's next `t` (docs/protocol.md, observe)."""
        start = time.perf_counter()
        cached = cached_reply(self.state, req)
        if cached is not None:
            return ObserveReply.from_body(req.request_id, cached, duplicate=True)
        self.claim.check(req.adapter, req.request_id)
        x = observation_point(self.config, self.strategy, req.gains, req.request_id)
        applied = self.record_observation(x, req.measurement, req.metadata, str(req.request_id),
                                          request_digest(req))
        self.readouts.latency["tell"].add(time.perf_counter() - start)
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
        guard_measurement(self.config, self.strategy, float(y), rid)
        t = self.strategy.t
        applied = self._commit({
            "kind": "observe", "id": f"{self.name}:{t}.observed", "t": t, "x": x.tolist(),
            "y": float(y), "failed": False, "measurement": float(y), "metadata": metadata,
            "rid": rid, "digest": digest})
        return applied

    def record_tell(self, step: dict[str, Any], rid: str) -> Applied:
        """Journal and apply a recorded step as the proposal and tell it was (`tvbod repair`
        rebuilding a plant from its history): `step` has the `measurement` event's `t`,
        `proposal_id`, `x`, `measurement` (the value told), `failed`, `raw_measurement` and
        `metadata`. The tell is guarded like a live one; the proposal is checked against the
        strategy's as on replay (a divergence is the record's: it is used)."""
        y = float(step["measurement"])
        guard_measurement(self.config, self.strategy, y, rid)
        pid, t, x = step["proposal_id"], int(step["t"]), list(step["x"])
        proposal = {"kind": "proposal", "id": pid, "t": t, "x": x, "rid": f"{rid}-ask",
                    "digest": rid}
        replay_divergence(self.state, proposal)
        self._commit(proposal)
        applied = self._commit({
            "kind": "tell", "id": pid, "t": t, "x": x, "y": y, "failed": bool(step["failed"]),
            "measurement": step.get("raw_measurement", y), "metadata": step.get("metadata") or {},
            "rid": rid, "digest": rid})
        return applied

    def _commit(self, record: dict[str, Any]) -> Applied:
        """Journal then apply a record (a `StorageError` propagates: the server answers it).
        The fsync is the server's group commit, before any reply of the batch is sent; a
        measurement's events wait for it (`synced`)."""
        try:
            self.store.journal.append(record, sync=False)
        except StorageError as exc:
            self.events.emit("storage_error", level="error", what="journal", error=str(exc))
            raise
        applied = apply(self.state, record)
        self.checkpointer.records_since += 1
        if applied.result is not None:
            self._unsynced.append(applied)
        return applied

    def synced(self) -> None:
        """The journal was fsync'd: write the event lines of the tells it made durable.

        Held back until now, so that a power cut cannot leave a `measurement` line (the history
        replay reads) for a tell whose journal record it took away, i.e. one never acknowledged.
        """
        unsynced, self._unsynced = self._unsynced, []
        for applied in unsynced:
            self.tell_events.emit(applied, self.strategy, self.config)

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

    def restore(self) -> dict[str, Any]:
        """Checkpoint + journal replay (tvbod/service/recovery.py)."""
        return recovery.restore(self)

    def record_optimizer(self) -> str:
        """Keep the optimizer mapping as `optimizers/<fingerprint>.json` in the plant's directory
        (events name it by fingerprint: a 50x50 kernel matrix does not belong in a log line)."""
        self.store.write_optimizer(self.config.fingerprint, self.config.optimizer_mapping)
        return self.config.fingerprint

    def checkpoint(self, reason: str) -> None:
        """Write a checkpoint of everything journaled so far and start a fresh journal."""
        self.synced()  # the checkpoint makes every applied record durable
        try:
            path = self.checkpointer.write(checkpoint_dict(self.state))
        except StorageError as exc:
            self.checkpointer.done(None, exc, reason, self.strategy.t)
            raise
        self.checkpointer.done(path, None, reason, self.strategy.t)

    # ------------------------------------------------------------------ jobs (workers.py)
    def has_work(self, propose: bool) -> bool:
        """True when a job has work: the deferred refit, or (`propose`) the next proposal."""
        if propose:
            return self.proposal is None and not self.strategy.proposal_ready
        return not self.strategy.settled

    def propose_on_loop(self) -> None:
        """The next proposal computed on the loop before the ask comes (its idle time,
        server.py): the tell's deferred work and the proposal only (no recommendation: this is
        for plants whose model work is light). An error is reported as a job's would be; the
        ask then computes the proposal again and answers the error."""
        start = time.perf_counter()
        try:
            self.strategy.ask()
        except Exception as exc:  # noqa: BLE001 - the loop must go on
            self.job_done(JobResult(self.strategy.t, time.perf_counter() - start, error=exc))
            return
        self.budget.check(self.strategy.t, time.perf_counter() - start)

    def run_job(self, propose: bool) -> tuple[tuple, dict | None]:
        """The next step's job, on a worker thread (tvbod/service/workers.py): the tell's
        deferred refit (`settle`), with `propose` the next proposal, and the recommendation;
        returns the `best` cache entry. Deterministic, so it changes no outcome, only when the
        work is done: a proposal is a pure function of the state and the step's seed."""
        return self.readouts.entry(run_job(self.strategy, propose))

    def adopt(self, strategy: Strategy, rec) -> tuple[tuple, dict | None]:
        """A process worker's job, back on the loop thread: `strategy` is this plant's strategy
        after `run_job` ran on a copy of it (pickled there and back, bit for bit), `rec` the
        recommendation it computed; returns the `best` cache entry as `run_job` does."""
        self.state.strategy = strategy
        return self.readouts.entry(rec)

    def job_done(self, outcome: JobResult) -> None:
        """A job's result, back on the loop thread: the `best` cache, `slow_proposal`, errors."""
        if outcome.error is not None:
            self.events.emit("internal_error", level="error", where="prepare",
                             error=repr(outcome.error))
            return
        self.readouts.best_entry = outcome.best
        self.budget.check(outcome.t, outcome.seconds)

    def status(self, with_best: bool = False, busy: bool = False) -> dict[str, Any]:
        return self.readouts.status(self.claim.adapter, with_best, busy)

    def close(self) -> None:
        self.store.close()
        self.events.close()
