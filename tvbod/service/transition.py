"""A plant's state and its one transition: `apply(state, record) -> Applied`.

`PlantState` is everything a plant must carry across a restart: its configuration and strategy,
the pending proposal and the protocol's bookkeeping (the request cache, the recently told and
abandoned proposal ids). `apply` is the same code live and when the journal is replayed on start:
it dispatches on the record's kind (`proposal`, `tell`, `observe`, `abandon`) to one function
each, changes the state and returns what it did; it writes no file and emits no event.

Glossary of the plant's words (tvbod/service/plant.py uses them so):
- *record*: one journal entry; *commit*: journal it, then `apply` it.
- *proposal*: the gains issued for step `t`, pending until told or abandoned.
- *job*: the model work for a plant's next step, off the reply path (tvbod/service/workers.py):
  the deferred refit (`settle`), with `propose` the next proposal, and the recommendation.
- *unsynced*: tells applied whose event lines wait for the journal's fsync.
- *parked*: requests waiting while their plant's job runs (tvbod/service/requests.py).
- *held*: only the trigger's word, a reset it held back (tvbod/core/trigger.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import msgpack
import numpy as np

from tvbod.core import Strategy, TellResult
from tvbod.service.config import PlantConfig

#: Proposal ids remembered as told / abandoned, to answer `duplicate_tell` / `stale_proposal`.
RECENT_IDS = 256


@dataclass(frozen=True)
class Applied:
    """What applying one journal record did.

    `reply`: the fields a request with this record's id is answered with (and again on a resend);
    `result`, `size_before`: the strategy's `TellResult` of a tell or observation and the dataset
    size before it (for the `measurement` and `reset` events); `problem`: a replay divergence."""

    record: dict[str, Any]
    reply: dict[str, Any] | None = None
    result: TellResult | None = None
    size_before: int | None = None
    problem: str | None = None


@dataclass(eq=False)
class PlantState:
    """A plant's configuration, strategy and protocol bookkeeping (what a checkpoint holds).

    The bounded tables are plain dicts in insertion order (`bounded_add`): `told` and `abandoned`
    map recent proposal ids to their step, `told_replies` a told proposal id to
    `pack_told(request digest, reply)` (for resends the request cache forgot), `cache` a request
    id to `(digest, reply fields)`."""

    config: PlantConfig
    strategy: Strategy
    request_cache: int = 64
    proposal: dict[str, Any] | None = None  # {id, t, x, gains}
    issued_at_t: int = 0  # proposal ids issued for the current step
    told: dict[str, int] = field(default_factory=dict)
    told_replies: dict[str, bytes] = field(default_factory=dict)
    abandoned: dict[str, int] = field(default_factory=dict)
    cache: dict[str, tuple[str, dict]] = field(default_factory=dict)
    tells: int = 0
    failed_tells: int = 0

    @property
    def name(self) -> str:
        return self.config.name

    def proposal_fields(self) -> dict[str, Any] | None:
        """The pending proposal as an `ask` reply (and `hello` / `status`) gives it."""
        if self.proposal is None:
            return None
        return {"proposal_id": self.proposal["id"], "gains": self.proposal["gains"],
                "t": self.proposal["t"]}

    def remember(self, rid: str, digest: str, reply: dict[str, Any]) -> None:
        """Cache a request's reply by its id, for a resend."""
        bounded_add(self.cache, rid, (digest, reply), self.request_cache)


def apply(state: PlantState, record: dict[str, Any]) -> Applied:
    """Apply a journal record to `state`, live or replayed; returns what it did."""
    applier = _APPLIERS.get(record["kind"])
    if applier is None:
        return Applied(record, problem=f"unknown journal record kind {record['kind']!r} skipped")
    return applier(state, record)


def replay_divergence(state: PlantState, record: dict[str, Any]) -> str | None:
    """On replay, a proposal record that differs from what the strategy proposes now (the record
    is used either way): a sentence, else None."""
    expected = state.strategy.ask()
    if np.array_equal(expected, np.asarray(record["x"])) and record["t"] == state.strategy.t:
        return None
    return (f"replay divergence at t={record['t']}: recorded proposal {list(record['x'])} "
            f"but the optimizer proposes {expected.tolist()}; using the record")


def _apply_proposal(state: PlantState, record: dict[str, Any]) -> Applied:
    state.proposal = {"id": record["id"], "t": record["t"], "x": record["x"],
                      "gains": state.config.gains(np.asarray(record["x"]))}
    state.issued_at_t += 1
    reply = state.proposal_fields()
    if "rid" in record:
        state.remember(record["rid"], record["digest"], reply)
    return Applied(record, reply=reply)


def _apply_measurement(state: PlantState, record: dict[str, Any]) -> Applied:
    """A tell, or an observation (a tell without a proposal)."""
    strategy = state.strategy
    size_before = strategy.dataset_size
    result = strategy.tell(np.asarray(record["x"]), record["y"], failed=bool(record["failed"]))
    # Packed until the plant's job reads it: with many plants the job may wait behind others'
    strategy.compact()
    state.tells += 1
    state.failed_tells += bool(record["failed"])
    bounded_add(state.told, record["id"], record["t"], RECENT_IDS)
    state.proposal = None
    state.issued_at_t = 0
    reply = {"t": result.t, "reset": result.reset, "psi": result.psi,
             "threshold": result.threshold, "dataset_size": result.dataset_size,
             "measurement": record["y"], "failed": record["failed"]}
    state.remember(record["rid"], record["digest"], reply)
    bounded_add(state.told_replies, record["id"], pack_told(record["digest"], reply), RECENT_IDS)
    return Applied(record, reply=reply, result=result, size_before=size_before)


def _apply_abandon(state: PlantState, record: dict[str, Any]) -> Applied:
    bounded_add(state.abandoned, record["id"], record["t"], RECENT_IDS)
    state.proposal = None
    return Applied(record)


#: The applier of each journal record kind.
_APPLIERS: dict[str, Callable[[PlantState, dict[str, Any]], Applied]] = {
    "proposal": _apply_proposal, "tell": _apply_measurement, "observe": _apply_measurement,
    "abandon": _apply_abandon}

#: The fields of a tell's or observation's reply, in the order `_apply_measurement` builds it.
#: `told_replies` keeps up to RECENT_IDS replies per plant, each as the msgpack bytes of
#: `[digest, *values]` (a fraction of the memory of a dict with its floats, ints and strings).
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
