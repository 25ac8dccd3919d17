"""The plant's one state transition: a journal record in, what it did (`Applied`) out.

`PlantTransitions._commit` journals a record then applies it; `_apply` dispatches on the record's
kind to one applier per kind (`proposal`, `tell`, `observe`, `abandon`), the same code live and on
replay. `_emit_tell_events` writes what a tell or observation did to the plant's event log (the
history `tvbod replay` reads back). Mixed into `PlantRuntime` (tvbod/service/plant.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from tvbod.core import TellResult
from tvbod.service.store import StorageError

#: Proposal ids remembered as told / abandoned, to answer `duplicate_tell` / `stale_proposal`.
RECENT_IDS = 256
#: |measurement on the GP scale| beyond this many prior standard deviations earns a warning.
_OUT_OF_RANGE_SIGMAS = 4.0
#: The applier of each journal record kind (an observation is a tell without a proposal).
_APPLIERS = {"proposal": "_apply_proposal", "tell": "_apply_measurement",
             "observe": "_apply_measurement", "abandon": "_apply_abandon"}


@dataclass(frozen=True)
class Applied:
    """What applying one journal record did (`PlantRuntime._apply`).

    `reply`: the fields a request with this record's id is answered with (and again on a resend);
    `result`, `size_before`: the strategy's `TellResult` of a tell or observation and the dataset
    size before it (for the `measurement` and `reset` events); `problem`: a replay divergence."""

    record: dict[str, Any]
    reply: dict[str, Any] | None = None
    result: TellResult | None = None
    size_before: int | None = None
    problem: str | None = None


#: The fields of a tell's or observation's reply, in the order `_apply_measurement` builds it.
#: `told_replies` keeps up to RECENT_IDS replies per plant, each as the msgpack bytes of
#: `[digest, *values]` (~80 bytes; as a dict with its floats, ints and strings, ~4-10x that).
TELL_REPLY_FIELDS = ("t", "reset", "psi", "threshold", "dataset_size", "measurement", "failed")


def pack_told(digest: str, reply: dict[str, Any]) -> bytes:
    """A `told_replies` entry: msgpack of `[digest, *values]` if `reply` has exactly
    TELL_REPLY_FIELDS in that order, else of `[digest, reply]` (a reply of another shape, e.g.
    from an older checkpoint). msgpack keeps every value exactly (floats as float64)."""
    if tuple(reply) == TELL_REPLY_FIELDS:
        return msgpack.packb([digest, *reply.values()])
    return msgpack.packb([digest, reply])


def unpack_told(entry: bytes) -> tuple[str, dict[str, Any]]:
    """`(digest, reply)` as `pack_told` was given them (an equal dict, same key order)."""
    items = msgpack.unpackb(entry, raw=False, strict_map_key=False)
    if len(items) == 2:
        return items[0], items[1]
    return items[0], dict(zip(TELL_REPLY_FIELDS, items[1:]))


def bounded_add(table: dict, key, value, limit: int) -> None:
    """Insert `key` as the newest entry, dropping the oldest beyond `limit`. The tables are plain
    dicts (insertion-ordered; a third of an OrderedDict's memory per entry)."""
    table.pop(key, None)
    table[key] = value
    while len(table) > limit:
        del table[next(iter(table))]


class PlantTransitions:
    """Journal records applied to the plant's state (the attributes `PlantRuntime` defines)."""

    def _commit(self, record: dict[str, Any]) -> Applied:
        """Journal then apply a record (a `StorageError` propagates: the server answers it).

        The fsync is the server's: it syncs every touched journal once per batch of requests
        (group commit) before any reply of that batch is sent.
        """
        try:
            self.store.journal.append(record, sync=False)
        except StorageError as exc:
            self.events.emit("storage_error", level="error", what="journal", error=str(exc))
            raise
        applied = self._apply(record)
        self.records_since_checkpoint += 1
        return applied

    def _apply(self, record: dict[str, Any]) -> Applied:
        """Apply a journal record, live or replayed; returns what it did."""
        applier = _APPLIERS.get(record["kind"])
        if applier is None:
            return Applied(record, problem=f"unknown journal record kind {record['kind']!r} skipped")
        return getattr(self, applier)(record)

    def _apply_proposal(self, record: dict[str, Any]) -> Applied:
        x = np.asarray(record["x"])
        expected = self.strategy.ask()
        problem = None
        if not np.array_equal(expected, x) or record["t"] != self.strategy.t:
            problem = (f"replay divergence at t={record['t']}: recorded proposal {x.tolist()} "
                       f"but the optimizer proposes {expected.tolist()}; using the record")
        self.proposal = {"id": record["id"], "t": record["t"], "x": record["x"],
                         "gains": self.config.gains(x)}
        self.issued_at_t += 1
        reply = self._proposal_fields()
        if "rid" in record:
            bounded_add(self.cache, record["rid"], (record["digest"], reply), self.request_cache)
        return Applied(record, reply=reply, problem=problem)

    def _apply_measurement(self, record: dict[str, Any]) -> Applied:
        size_before = self.strategy.dataset_size
        result = self.strategy.tell(np.asarray(record["x"]), record["y"], failed=bool(record["failed"]))
        # Packed until the plant's job reads it: with many plants the job may wait behind others'
        self.strategy.compact()
        self.tells += 1
        self.failed_tells += bool(record["failed"])
        bounded_add(self.told, record["id"], record["t"], RECENT_IDS)
        self.proposal = None
        self.issued_at_t = 0
        reply = {"t": result.t, "reset": result.reset, "psi": result.psi,
                 "threshold": result.threshold, "dataset_size": result.dataset_size,
                 "measurement": record["y"], "failed": record["failed"]}
        bounded_add(self.cache, record["rid"], (record["digest"], reply), self.request_cache)
        bounded_add(self.told_replies, record["id"], pack_told(record["digest"], reply), RECENT_IDS)
        return Applied(record, reply=reply, result=result, size_before=size_before)

    def _apply_abandon(self, record: dict[str, Any]) -> Applied:
        bounded_add(self.abandoned, record["id"], record["t"], RECENT_IDS)
        self.proposal = None
        return Applied(record)

    def _emit_tell_events(self, applied: Applied, replayed: bool = False) -> None:
        """`measurement` (the plant's complete history: replay reads it back) and `reset` events.

        On restore, journaled tells are emitted again with `replayed: true`: a crash may have
        struck between the journal write and the event line; readers dedupe by `proposal_id`.
        """
        ev, result, record = self.events, applied.result, applied.record
        y = record["y"]
        extra = {"replayed": True} if replayed else {}
        ev.emit("measurement", t=result.t, proposal_id=record["id"], x=record["x"],
                gains=self.config.gains(np.asarray(record["x"])), measurement=y,
                failed=record["failed"], raw_measurement=record["measurement"], psi=result.psi,
                threshold=result.threshold, mu=result.mu, sigma=result.sigma, reset=result.reset,
                t_prime=result.t_prime, dataset_size=result.dataset_size,
                metadata=record.get("metadata") or None, **_window_fields(result),
                **self._safety_fields(result),
                **({"observed": True} if record["kind"] == "observe" else {}), **extra)
        if result.reset:
            ev.emit("reset", level="warning", t=result.t, t_prime=result.t_prime, psi=result.psi,
                    threshold=result.threshold, reason=result.reset_reason,
                    dataset_size_before=applied.size_before,
                    dataset_size_after=result.dataset_size, **_window_fields(result),
                    **({"backup": self.config.gains(np.asarray(result.backup))}
                       if result.backup is not None else {}), **extra)
        if result.reset_burst and not replayed:
            trig = self.strategy.spec.trigger
            hold = self.strategy.trigger.hold
            ev.emit("reset_burst", level="warning", t=result.t, resets=trig.burst_resets + 1,
                    within_steps=trig.burst_steps, refractory_steps=hold,
                    hint="resets faster than the trigger's burst rate: the model does not fit the "
                    f"measurements; no reset for the next {hold} steps (the refractory backoff). Check "
                    "the measurement map and lengthscales (docs/configuration.md, Measurement "
                    "scaling)")
        if not replayed:
            self._warn_out_of_range(result, y)
        if result.safety_violation and not replayed:
            safety = self.strategy.spec.safety
            ev.emit("safety_violation", level="warning", t=result.t, proposal_id=record["id"],
                    gains=self.config.gains(np.asarray(record["x"])),
                    measurement=record["measurement"], threshold=safety.threshold,
                    failed=record["failed"], violations=self.strategy.safety.violations,
                    hint="the measurement crossed optimizer.safety's threshold (or the experiment "
                    "failed): the point and its neighbourhood leave the safe set. Frequent "
                    "violations: raise safety.sigmas or lower safety.max_step "
                    "(docs/configuration.md, Safe tuning)")

    def _safety_fields(self, result) -> dict[str, Any]:
        """A `measurement` event's safety fields (plants with `safety:`): whether it violated
        the threshold, the value the model recorded, and the safe set's share of the box."""
        if self.strategy.spec.safety is None:
            return {}
        return {"safety_violation": result.safety_violation,
                "safe_fraction": result.safe_fraction}

    def _warn_out_of_range(self, result, y: float) -> None:
        """`measurement_out_of_range`, at most once per regime (the steps since the last reset):
        a measurement more than `_OUT_OF_RANGE_SIGMAS` prior standard deviations from the GP's
        prior mean, with a hint that fits how the measurement map was set."""
        regime = result.t - result.t_prime
        prior_sd = float(np.sqrt(self.strategy.spec.kernel.variance))
        y_gp = self.strategy.to_internal_y(y)
        if self.out_of_range_regime == regime or abs(y_gp) <= _OUT_OF_RANGE_SIGMAS * prior_sd:
            return
        self.out_of_range_regime = regime
        self.events.emit("measurement_out_of_range", level="warning", t=result.t, measurement=y,
                         scaled=y_gp, regime_start=regime, hint=_range_hint(self.strategy.spec))


def _range_hint(spec) -> str:
    """What an operator can do about measurements far outside the GP's prior range."""
    if spec.calibrates:
        return (f"measurement: auto set the GP's scale from the first {spec.n_calibration} "
                "measurements, and this one lies far outside their spread; if such values are "
                "normal for this plant, raise optimizer.measurement.calibration_points so the "
                "scale sees them (a new plant state), or set offset/scale by hand "
                "(docs/configuration.md, Measurement scaling). Shown once per regime")
    return ("set optimizer.measurement offset/scale (or auto) so measurements land within a few "
            "prior standard deviations; otherwise the trigger fires spuriously. Shown once per "
            "regime")


def _window_fields(result) -> dict[str, Any]:
    """The robust trigger's fields of `measurement` and `reset` events (docs/events.md): which test
    fired, the window test's most significant window and its statistic against its threshold,
    whether a reset was held back, and (when so) whether for an uninformed residual. Empty for
    the paper's trigger."""
    if result.window == 0 and not result.held:  # the paper's trigger, or no window yet
        return {"test": result.test} if result.test else {}
    return {"test": result.test, "window": result.window, "window_psi": result.window_psi,
            "window_threshold": result.window_threshold, "held": result.held,
            **({"uninformed": True} if result.uninformed else {})}
