"""One plant inside the daemon: its strategy, pending proposal, idempotency cache and persistence.

Every state change is a journal record applied by one function, `_apply`, both live and when
replaying the journal on start. Live, a record is first appended to the journal (fsync'd), then
applied, then answered: a crash at any point either loses an unacknowledged request (the client
retries it) or replays an acknowledged one exactly (same seeds, same order, same result).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import numpy as np

from tvbod.core import Strategy, make_strategy
from tvbod.core.errors import DomainError
from tvbod.core.recommend import recommend
from tvbod.core.spec import with_explicit_trigger
from tvbod.errors import TvbodError
from tvbod.protocol import Ask, Best, ErrorCode, Hello, Observe, ProtocolError, Tell
from tvbod.service import fsio
from tvbod.service.config import PlantConfig
from tvbod.service.events import PlantEventLog
from tvbod.service.store import PlantStore, StorageError, UnsupportedSchema

#: Proposal ids remembered as told / abandoned, to answer `duplicate_tell` / `stale_proposal`.
_RECENT_IDS = 256
#: Latency samples kept per request type for the status percentiles.
_LATENCY_WINDOW = 1000
#: |measurement on the GP scale| beyond this many prior standard deviations earns a warning.
_OUT_OF_RANGE_SIGMAS = 4.0
_STATE_SCHEMA = 1


class RestoreError(TvbodError):
    """The saved state cannot be used with the plant's configuration (the daemon refuses to start)."""


def _digest(req: Ask | Tell | Observe) -> str:
    """What makes two requests with the same id the same request."""
    if isinstance(req, Tell):
        key = (req.type, req.plant, req.proposal_id, req.measurement, req.failed)
    elif isinstance(req, Observe):
        key = (req.type, req.plant, sorted(req.gains.items()), req.measurement)
    else:
        key = (req.type, req.plant)
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def _bounded_add(table: OrderedDict, key, value, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


def observation_point(config: PlantConfig, strategy: Strategy, gains: dict,
                      request_id=None) -> np.ndarray:
    """The physical point of `gains` (every parameter by name, within its bounds), else
    `bad_field` / `out_of_bounds`. Shared by `observe` and `tvbod import`."""
    try:
        x = config.point(gains)
    except DomainError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(exc), request_id) from None
    try:
        strategy.domain.to_internal(x)
    except DomainError as exc:
        raise ProtocolError(ErrorCode.OUT_OF_BOUNDS, str(exc), request_id) from None
    return x


class LatencyWindow:
    """The last `_LATENCY_WINDOW` service times of one request type, for p50/p99 in `status`."""

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=_LATENCY_WINDOW)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    def percentiles(self) -> tuple[float | None, float | None]:
        if not self.samples:
            return None, None
        p50, p99 = np.percentile(np.fromiter(self.samples, float), [50, 99])
        return round(float(p50) * 1e3, 3), round(float(p99) * 1e3, 3)


class PlantRuntime:
    """The daemon's view of one plant; the server calls `hello`, `ask`, `tell`, `status`, `tick`."""

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
        self.told: OrderedDict[str, int] = OrderedDict()
        #: proposal id -> (request digest, reply) of recent tells, for retries the cache forgot
        self.told_replies: OrderedDict[str, tuple[str, dict]] = OrderedDict()
        self.abandoned: OrderedDict[str, int] = OrderedDict()
        self.cache: OrderedDict[str, tuple[str, dict]] = OrderedDict()
        self.tells = 0
        self.failed_tells = 0
        self.records_since_checkpoint = 0
        self.adapter: str | None = None  # the adapter driving this plant (see `claim`)
        self.adapter_seen = 0.0  # monotonic time of its last request
        self.latency = {"ask": LatencyWindow(), "tell": LatencyWindow()}
        self._best: tuple[tuple, dict | None] | None = None  # (key, `best` fields) cache
        self._held: list[tuple] = []  # tell events waiting for the journal's fsync (`synced`)

    # ------------------------------------------------------------------ persistence
    def restore(self) -> dict[str, Any]:
        """Load the checkpoint, replay the journal after it, and report what was done."""
        try:
            rec = self.store.recover()
        except UnsupportedSchema as exc:
            raise RestoreError(
                f"plant {self.name!r}: {exc}. The state in {self.store.directory} was written by "
                "another tvbod version; run that version, or migrate (docs/deployment.md, "
                "Upgrades)") from exc
        expected = rec.journal_seq + 1
        for record in rec.records_after_checkpoint:
            if record["seq"] != expected:
                raise RestoreError(
                    f"plant {self.name!r}: journal records {expected}..{record['seq'] - 1} are "
                    f"missing after the {rec.source} checkpoint ({'; '.join(rec.problems)}); "
                    f"refusing to continue with a partial history. Inspect with `tvbod inspect "
                    f"{self.store.directory}`; move the directory aside to start this plant afresh")
            expected = record["seq"] + 1
        state = rec.state
        config_changed = False
        if state is not None:
            config_changed = state.get("fingerprint") != self.config.fingerprint
            self._load_state(state)
            if config_changed:
                from tvbod.service.reload import changed_keys

                # Replay reads this to switch configuration at the right step.
                self.events.emit("config_reloaded", t=self.strategy.t, at="start",
                                 changed=changed_keys(_stored_optimizer(state),
                                                      self.config.optimizer_mapping),
                                 fingerprint=self.record_optimizer(),
                                 pending=(self.proposal or {}).get("id"))
        replayed, relogged, divergences = 0, 0, []
        logged = self._logged_measurements(rec.records_after_checkpoint)
        for record in rec.records_after_checkpoint:
            problem = self._apply(record)
            if problem:
                divergences.append(problem)
            if record["kind"] in ("tell", "observe") and record["id"] not in logged:
                # The crash came between the journal write and the event line: log it now.
                self._emit_tell_events(self._last_result, record, replayed=True)
                relogged += 1
            replayed += 1
        # Replayed records count toward the next checkpoint: a daemon that crashes more often
        # than every `checkpoint_every` records still compacts, so replay per start stays bounded.
        self.records_since_checkpoint = replayed
        if self.proposal is not None:
            self.proposal_deadline = time.monotonic() + self.config.proposal_timeout
        info = {
            "source": rec.source, "journal_seq": rec.journal_seq, "replayed": replayed,
            "relogged": relogged,
            "problems": list(rec.problems) + divergences, "config_changed": config_changed,
            "t": self.strategy.t, "dataset_size": self.strategy.dataset_size,
            "pending": None if self.proposal is None else self.proposal["id"],
        }
        level = "warning" if info["problems"] else "info"
        info["fingerprint"] = self.record_optimizer()  # replay reads the configuration by it
        self.events.emit("plant_restored", level=level, **info)
        if self.checkpoint_due:
            try:
                self.checkpoint("recovery")
            except StorageError:
                pass  # reported as storage_error; the next periodic checkpoint tries again
        return info

    def _logged_measurements(self, records: list[dict[str, Any]]) -> set[str]:
        """Proposal ids of journaled tells whose `measurement` line is already in events.jsonl."""
        from tvbod.service.event_files import logged_measurements

        steps = [r["t"] for r in records if r["kind"] in ("tell", "observe")]
        return logged_measurements(self.events.path, min(steps)) if steps else set()

    def _load_state(self, state: dict) -> None:
        from tvbod.service.reload import frozen_changes

        try:
            if state.get("schema") != _STATE_SCHEMA:
                raise RestoreError(f"checkpoint schema {state.get('schema')!r}, expected {_STATE_SCHEMA}")
            frozen = frozen_changes(_stored_optimizer(state), self.config.optimizer_mapping)
            if frozen:
                raise RestoreError(
                    f"plant {self.name!r}: the configuration changed "
                    f"{', '.join('optimizer.' + k for k in frozen)} since the state in "
                    f"{self.store.directory} was written; the stored data cannot be reinterpreted. "
                    "Restore the old configuration, or move the directory aside to start afresh")
            strategy_state = dict(state["strategy"])
            if state["proposal"] is None and state.get("fingerprint") != self.config.fingerprint:
                # A point prepared (never issued) under the old settings: recompute it under
                # the new ones, exactly as replay does.
                strategy_state["pending"] = None
            self.strategy.load_state_dict(strategy_state)
            self.proposal = state["proposal"]
            self.issued_at_t = int(state["issued_at_t"])
            self.told = OrderedDict((k, int(v)) for k, v in state["told"])
            self.abandoned = OrderedDict((k, int(v)) for k, v in state["abandoned"])
            self.told_replies = OrderedDict(  # absent in checkpoints written before it existed
                (pid, (dg, reply)) for pid, dg, reply in state.get("told_replies", []))
            self.cache = OrderedDict((rid, (dg, reply)) for rid, dg, reply in state["cache"])
            self.tells, self.failed_tells = int(state["tells"]), int(state["failed_tells"])
        except RestoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed state is one kind of problem
            raise RestoreError(
                f"plant {self.name!r}: the saved state in {self.store.directory} does not fit the "
                f"plant's configuration ({exc}); restore the old configuration or move the "
                f"directory aside to start this plant afresh"
            ) from exc

    def record_optimizer(self) -> str:
        """Keep the optimizer mapping as `optimizers/<fingerprint>.json` in the plant's directory
        (events name it by fingerprint: a 50x50 kernel matrix does not belong in a log line)."""
        fp = self.config.fingerprint
        path = self.store.directory / "optimizers" / f"{fp}.json"
        if not path.exists():
            fsio.makedirs(path.parent)
            tmp = path.with_suffix(".tmp")
            fd = fsio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                fsio.append(fd, json.dumps(self.config.optimizer_mapping).encode("utf-8"))
                fsio.fsync(fd)
            finally:
                fsio.close(fd)
            fsio.replace(tmp, path)
            fsio.fsync_dir(path.parent)  # replay needs it after a power cut, too
        return fp

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: strategy state plus the protocol bookkeeping."""
        return {
            "schema": _STATE_SCHEMA,
            "plant": self.name,
            "fingerprint": self.config.fingerprint,
            "optimizer": self.config.optimizer_mapping,
            "strategy": self.strategy.state_dict(),
            "proposal": self.proposal,
            "issued_at_t": self.issued_at_t,
            "told": [[k, v] for k, v in self.told.items()],
            "abandoned": [[k, v] for k, v in self.abandoned.items()],
            "told_replies": [[pid, dg, reply] for pid, (dg, reply) in self.told_replies.items()],
            "cache": [[rid, dg, reply] for rid, (dg, reply) in self.cache.items()],
            "tells": self.tells,
            "failed_tells": self.failed_tells,
        }

    @property
    def checkpoint_due(self) -> bool:
        return self.records_since_checkpoint >= self.checkpoint_every

    def write_checkpoint(self, state: dict[str, Any]) -> Path:
        """The I/O half of a checkpoint (thread-safe per plant: touches only this plant's files).

        The event lines (the plant's full history, which replay reads) are fsync'd first: the
        journal records that the checkpoint absorbs can no longer re-emit them after a power cut.
        """
        self.events.sync()
        path = self.store.compact(state)
        self._rotation = None
        try:
            if self.events_segment_bytes and \
                    os.path.getsize(self.events.path) >= self.events_segment_bytes:
                removed = self.events.rotate(path, self.events_keep_segments)
                self._rotation = (self.events.path.name, removed)
        except OSError as exc:
            self._rotation = str(exc)
        return path

    def checkpoint_done(self, path: Path | None, error: Exception | None, reason: str) -> None:
        """Bookkeeping and events after `write_checkpoint` (on the loop's thread)."""
        if error is not None:
            self.events.emit("storage_error", level="error", what="checkpoint", error=str(error))
            return
        self.records_since_checkpoint = 0
        self.events.emit("checkpoint_written", t=self.strategy.t, path=str(path), reason=reason,
                         journal_seq=self.store.journal.last_seq)
        rotation, self._rotation = self._rotation, None
        if isinstance(rotation, str):
            self.events.emit("storage_error", level="error", what="event log rotation",
                             error=rotation)
        elif rotation is not None:
            from tvbod.service.event_files import rotated_segments

            self.events.emit("events_rotated", t=self.strategy.t,
                             segment=rotated_segments(self.store.directory)[-1][1].name,
                             removed=rotation[1])

    def checkpoint(self, reason: str) -> None:
        """Write a checkpoint of everything journaled so far and start a fresh journal."""
        self.synced()  # the checkpoint makes every applied record durable
        try:
            path = self.write_checkpoint(self.state())
        except StorageError as exc:
            self.checkpoint_done(None, exc, reason)
            raise
        self.checkpoint_done(path, None, reason)

    def _commit(self, record: dict[str, Any]) -> str | None:
        """Journal then apply a record; `StorageError` becomes `storage_unavailable`.

        The fsync is the server's: it syncs every touched journal once per batch of requests
        (group commit) before any reply of that batch is sent.
        """
        try:
            self.store.journal.append(record, sync=False)
        except StorageError as exc:
            self.events.emit("storage_error", level="error", what="journal", error=str(exc))
            raise ProtocolError(ErrorCode.STORAGE_UNAVAILABLE,
                                f"the daemon cannot persist to its state directory: {exc}") from exc
        problem = self._apply(record)
        self.records_since_checkpoint += 1
        return problem

    def prepare_reconfigure(self, config: PlantConfig) -> Strategy:
        """A strategy for the new configuration holding this plant's exact state (may raise)."""
        state = self.strategy.state_dict()
        if self.proposal is None:
            state["pending"] = None  # a prepared, unissued point is recomputed under the new settings
        strategy = make_strategy(config.optimizer)
        strategy.load_state_dict(state)
        return strategy

    def reconfigure(self, config: PlantConfig, strategy: Strategy, changed: list[str]) -> None:
        """Switch to a new configuration (from `prepare_reconfigure`) and checkpoint at once, so
        the checkpoint, the journal after it and the event history agree on the configuration."""
        old = self.config.fingerprint
        self.config, self.strategy = config, strategy
        self.events.emit("config_reloaded", t=strategy.t, at="reload", changed=changed,
                         fingerprint=self.record_optimizer(), previous_fingerprint=old,
                         pending=(self.proposal or {}).get("id"))
        self.checkpoint("reload")

    # ------------------------------------------------------------------ the one state transition
    def _apply(self, record: dict[str, Any]) -> str | None:
        """Apply a journal record; returns a problem description if replay diverged."""
        kind = record["kind"]
        if kind == "proposal":
            x = np.asarray(record["x"])
            expected = self.strategy.ask()
            problem = None
            if not np.array_equal(expected, x) or record["t"] != self.strategy.t:
                problem = (f"replay divergence at t={record['t']}: recorded proposal {x.tolist()} "
                           f"but the optimizer proposes {expected.tolist()}; using the record")
            self.proposal = {"id": record["id"], "t": record["t"], "x": record["x"],
                             "gains": self.config.gains(x)}
            self.issued_at_t += 1
            if "rid" in record:
                reply = {"proposal_id": record["id"], "gains": self.proposal["gains"], "t": record["t"]}
                _bounded_add(self.cache, record["rid"], (record["digest"], reply), self.request_cache)
            return problem
        if kind in ("tell", "observe"):  # an observation is a tell without a proposal
            self._size_before_reset = self.strategy.dataset_size
            result = self.strategy.tell(np.asarray(record["x"]), record["y"])
            self.tells += 1
            self.failed_tells += bool(record["failed"])
            _bounded_add(self.told, record["id"], record["t"], _RECENT_IDS)
            self.proposal = None
            self.issued_at_t = 0
            reply = {"t": result.t, "reset": result.reset, "psi": result.psi,
                     "threshold": result.threshold, "dataset_size": result.dataset_size,
                     "measurement": record["y"], "failed": record["failed"]}
            _bounded_add(self.cache, record["rid"], (record["digest"], reply), self.request_cache)
            _bounded_add(self.told_replies, record["id"], (record["digest"], reply), _RECENT_IDS)
            self._last_result, self._last_record = result, record
            return None
        if kind == "abandon":
            _bounded_add(self.abandoned, record["id"], record["t"], _RECENT_IDS)
            self.proposal = None
            return None
        return f"unknown journal record kind {kind!r} skipped"

    # ------------------------------------------------------------------ requests
    def describe(self) -> dict[str, Any]:
        """The plant's description for `hello` and `status`."""
        params = [{"name": p.name, "lower": p.lower, "upper": p.upper, "unit": p.unit,
                   **({"arms": p.arms} if p.arms else {})} for p in self.config.parameters]
        return {"plant": self.name, "parameters": params, "sense": self.config.sense,
                "t": self.strategy.t, "pending": self._proposal_fields()}

    def _proposal_fields(self) -> dict[str, Any] | None:
        if self.proposal is None:
            return None
        return {"proposal_id": self.proposal["id"], "gains": self.proposal["gains"],
                "t": self.proposal["t"]}

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

    def hello(self, req: Hello) -> dict[str, Any]:
        self.claim(req.adapter, req.request_id)
        return self.describe()

    def _cached(self, req: Ask | Tell) -> dict[str, Any] | None:
        hit = self.cache.get(str(req.request_id))
        if hit is None:
            return None
        digest, reply = hit
        if digest != _digest(req):
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"request id {req.request_id!r} was already used for a different "
                                "request; use a fresh id for every new request", req.request_id)
        return reply

    def ask(self, req: Ask) -> dict[str, Any]:
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return dict(cached)
        self.claim(req.adapter, req.request_id)
        if self.proposal is None:
            x = self.strategy.ask()
            t = self.strategy.t
            pid = f"{self.name}:{t}" + (f".{self.issued_at_t}" if self.issued_at_t else "")
            self._commit({"kind": "proposal", "id": pid, "t": t, "x": x.tolist(),
                          "rid": str(req.request_id), "digest": _digest(req)})
            self.proposal_deadline = time.monotonic() + self.config.proposal_timeout
            self.events.emit("proposal", t=t, proposal_id=pid, gains=self.proposal["gains"])
            elapsed_ms = (time.perf_counter() - start) * 1e3
            if elapsed_ms > self.ask_time_budget_ms:
                self.events.emit("slow_proposal", level="warning", t=t, ms=round(elapsed_ms, 1),
                                 budget_ms=self.ask_time_budget_ms)
        else:
            _bounded_add(self.cache, str(req.request_id), (_digest(req), self._proposal_fields()),
                         self.request_cache)
        self.latency["ask"].add(time.perf_counter() - start)
        return self._proposal_fields()

    def tell(self, req: Tell) -> dict[str, Any]:
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return {**cached, "duplicate": True}
        self.claim(req.adapter, req.request_id)
        pid = req.proposal_id
        if self.proposal is None or pid != self.proposal["id"]:
            earlier = self.told_replies.get(pid)
            if earlier is not None and earlier[0] == _digest(req):
                # A resend whose reply left the request cache: the journal knows its outcome.
                return {**earlier[1], "duplicate": True}
            if pid in self.told:
                raise ProtocolError(ErrorCode.DUPLICATE_TELL,
                                    f"proposal {pid!r} was already told (step {self.told[pid]})",
                                    req.request_id)
            if pid in self.abandoned:
                raise ProtocolError(ErrorCode.STALE_PROPOSAL,
                                    f"proposal {pid!r} was abandoned after its timeout; ask again",
                                    req.request_id)
            raise ProtocolError(ErrorCode.UNKNOWN_PROPOSAL,
                                f"proposal {pid!r} is not the pending proposal of {self.name!r}"
                                + (f" (pending: {self.proposal['id']!r})" if self.proposal else ""),
                                req.request_id)
        if not req.failed:
            self._guard_measurement(float(req.measurement), req.request_id)
        x = np.asarray(self.proposal["x"])
        y = self._failure_value(x) if req.failed else float(req.measurement)
        t = self.proposal["t"]
        self._commit({"kind": "tell", "id": pid, "t": t, "x": self.proposal["x"], "y": y,
                      "failed": req.failed, "measurement": req.measurement,
                      "metadata": req.metadata, "rid": str(req.request_id), "digest": _digest(req)})
        self._held.append((self._last_result, self._last_record, self._size_before_reset))
        reply = {**self.cache[str(req.request_id)][1], "duplicate": False}
        self.latency["tell"].add(time.perf_counter() - start)
        return reply

    def _guard_measurement(self, y: float, request_id) -> None:
        """Refuse a measurement beyond `max_measurement_sigmas` prior standard deviations on the
        GP scale (a unit mistake or a garbage sensor value): `bad_field`, nothing applied."""
        limit = self.config.max_measurement_sigmas * float(np.sqrt(self.strategy.spec.kernel.variance))
        with np.errstate(all="ignore"):
            scaled = abs(self.strategy.to_internal_y(y))
        if not scaled <= limit:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"measurement {y!r} is {scaled:.3g} prior standard deviations from the plant's "
                f"offset, beyond max_measurement_sigmas = {self.config.max_measurement_sigmas:g} "
                f"(plant file {self.config.path}); check the units, or send failed=true",
                request_id)

    def check_observation(self, gains: dict, request_id=None) -> np.ndarray:
        """The physical point of `gains` (see `observation_point`)."""
        return observation_point(self.config, self.strategy, gains, request_id)

    def observe(self, req: Observe) -> dict[str, Any]:
        """A measurement taken elsewhere: journaled, applied and evented like a tell. It is a
        step: it gets the plant's next `t` (docs/protocol.md, observe)."""
        start = time.perf_counter()
        cached = self._cached(req)
        if cached is not None:
            return {**cached, "duplicate": True}
        self.claim(req.adapter, req.request_id)
        x = self.check_observation(req.gains, req.request_id)
        reply = self.record_observation(x, req.measurement, req.metadata, str(req.request_id),
                                        _digest(req))
        self.latency["tell"].add(time.perf_counter() - start)
        return reply

    def record_observation(self, x: np.ndarray, y: float, metadata: dict, rid: str,
                           digest: str) -> dict[str, Any]:
        """Journal and apply one observation at the checked point `x` (`observe`, `tvbod
        import`); refused while a proposal is pending, whose step it would take."""
        if self.proposal is not None:
            raise ProtocolError(
                ErrorCode.PROPOSAL_PENDING,
                f"plant {self.name!r} has proposal {self.proposal['id']!r} pending; tell it (or "
                f"let it time out after {self.config.proposal_timeout:g} s) before observing", rid)
        t = self.strategy.t
        self._commit({"kind": "observe", "id": f"{self.name}:{t}.observed", "t": t,
                      "x": x.tolist(), "y": float(y), "failed": False, "measurement": float(y),
                      "metadata": metadata, "rid": rid, "digest": digest})
        self._held.append((self._last_result, self._last_record, self._size_before_reset))
        return {**self.cache[rid][1], "duplicate": False}

    def best(self, req: Best | None = None) -> dict[str, Any]:  # noqa: ARG002
        """The recommendation now (tvbod/core/recommend.py), cached until the next tell."""
        key = (self.strategy.t, self.strategy.dataset_size, self.config.fingerprint)
        if self._best is None or self._best[0] != key:
            rec = recommend(self.strategy)
            fields = None if rec is None else {
                "gains": self.config.gains(rec.x), "mean": rec.mean, "std": rec.std,
                "measured_at": rec.measured_at}
            self._best = (key, fields)
        fields = self._best[1] or {"gains": None, "mean": None, "std": None, "measured_at": None}
        return {"plant": self.name, "t": self.strategy.t, "dataset_size": self.strategy.dataset_size,
                "sense": self.config.sense, "rule": "posterior-mean maximizer over D", **fields}

    def synced(self) -> None:
        """The journal was fsync'd: write the event lines of the tells it made durable.

        Held back until now, so that a power cut cannot leave a `measurement` line (the history
        replay reads) for a tell whose journal record it took away, i.e. one never acknowledged.
        """
        held, self._held = self._held, []
        for result, record, size_before in held:
            self._size_before_reset = size_before
            self._emit_tell_events(result, record)

    def _failure_value(self, x: np.ndarray) -> float:
        """The measurement substituted for a failed experiment (the plant's `failure` policy)."""
        policy = self.config.failure
        mean, std = self.strategy.predict(x) if policy.kind != "penalty" else (0.0, 0.0)
        return policy.measurement(mean, std, self.config.sense)

    def _emit_tell_events(self, result, record: dict[str, Any], replayed: bool = False) -> None:
        """`measurement` (the plant's complete history: replay reads it back) and `reset` events.

        On restore, journaled tells are emitted again with `replayed: true`: a crash may have
        struck between the journal write and the event line; readers dedupe by `proposal_id`.
        """
        ev = self.events
        y = record["y"]
        extra = {"replayed": True} if replayed else {}
        ev.emit("measurement", t=result.t, proposal_id=record["id"], x=record["x"],
                gains=self.config.gains(np.asarray(record["x"])), measurement=y,
                failed=record["failed"], raw_measurement=record["measurement"], psi=result.psi,
                threshold=result.threshold, mu=result.mu, sigma=result.sigma, reset=result.reset,
                t_prime=result.t_prime, dataset_size=result.dataset_size,
                metadata=record.get("metadata") or None, **_window_fields(result),
                **({"observed": True} if record["kind"] == "observe" else {}), **extra)
        if result.reset:
            ev.emit("reset", level="warning", t=result.t, t_prime=result.t_prime, psi=result.psi,
                    threshold=result.threshold, reason=result.reset_reason,
                    dataset_size_before=self._size_before_reset,
                    dataset_size_after=result.dataset_size, **_window_fields(result), **extra)
        if result.reset_burst and not replayed:
            trig = self.strategy.spec.trigger
            ev.emit("reset_burst", level="warning", t=result.t, resets=trig.burst_resets + 1,
                    within_steps=trig.burst_steps,
                    hint="resets faster than the trigger's burst rate: a reset loop. Check the "
                    "measurement offset/scale (docs/configuration.md, Measurement scaling) or raise "
                    "optimizer.trigger.refractory")
        prior_sd = float(np.sqrt(self.strategy.spec.kernel.variance))
        y_gp = self.strategy.to_internal_y(y)
        if not replayed and abs(y_gp) > _OUT_OF_RANGE_SIGMAS * prior_sd:
            ev.emit("measurement_out_of_range", level="warning", t=result.t, measurement=y,
                    scaled=y_gp, hint="set optimizer.measurement offset/scale so measurements land "
                    "within a few prior standard deviations; otherwise the trigger fires spuriously")

    # ------------------------------------------------------------------ housekeeping
    def tick(self, now: float) -> None:
        """Abandon a proposal whose timeout passed (journaled, so a restart agrees)."""
        if self.proposal is None or self.proposal_deadline is None or now < self.proposal_deadline:
            return
        pid, t = self.proposal["id"], self.proposal["t"]
        try:
            self._commit({"kind": "abandon", "id": pid, "t": t})
        except ProtocolError:
            self.proposal_deadline = now + 1.0  # storage is down; try again later
            return
        self.proposal_deadline = None
        self.events.emit("proposal_abandoned", t=t, proposal_id=pid,
                         timeout_s=self.config.proposal_timeout)

    def prepare(self) -> bool:
        """Compute the next proposal ahead of the `ask` (deterministic, so it changes no outcome)."""
        if self.proposal is None and self.strategy.pending is None:
            self.strategy.ask()
            return True
        return False

    def status(self, with_best: bool = False) -> dict[str, Any]:
        """Counters and latencies; `with_best` adds `best` (the `status` request; not the
        once-a-second STATUS= line, for which a posterior per plant would cost too much)."""
        ask50, ask99 = self.latency["ask"].percentiles()
        tell50, tell99 = self.latency["tell"].percentiles()
        s = self.strategy
        return {
            "plant": self.name, "strategy": s.name, "t": s.t, "dataset_size": s.dataset_size,
            "resets": s.resets, "last_reset_t": s.last_reset_t, "tells": self.tells,
            "failed_tells": self.failed_tells, "pending": self._proposal_fields(),
            "adapter": self.adapter,
            **({"best": self.best()} if with_best else {}),
            "latency": {"ask_p50_ms": ask50, "ask_p99_ms": ask99,
                        "tell_p50_ms": tell50, "tell_p99_ms": tell99},
        }

    def close(self) -> None:
        self.store.close()
        self.events.close()


def _stored_optimizer(state: dict) -> dict:
    """The optimizer mapping a checkpoint was written under, its trigger spelled out (a mapping
    stored by tvbod 0.1.0 has no `trigger` key: its ET-GP-UCB was the paper's)."""
    return with_explicit_trigger(state.get("optimizer", {}), stored_before_0_2=True)


def _window_fields(result) -> dict[str, Any]:
    """The robust trigger's fields of `measurement` and `reset` events (docs/events.md): which test
    fired, the window test's most significant window and its statistic against its threshold,
    and whether the refractory period held a reset back. Empty for the paper's trigger."""
    if result.window == 0 and not result.held:  # the paper's trigger, or no window yet
        return {"test": result.test} if result.test else {}
    return {"test": result.test, "window": result.window, "window_psi": result.window_psi,
            "window_threshold": result.window_threshold, "held": result.held}
