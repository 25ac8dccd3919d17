"""A request's identity: resends get the first reply, reused ids and stale proposals an error.

Clients retry on silence (docs/protocol.md, *Retries*), so every request that changes a plant is
answered from the plant's request cache when its id was seen with the same content
(`request_digest`), and a tell for a proposal that is not the pending one is told why
(`refuse_tell`): a duplicate, an abandoned or stale proposal, or one this plant never issued.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tvbod.protocol import Ask, ErrorCode, Observe, ProtocolError, Tell
from tvbod.service.transition import RECENT_IDS, PlantState, unpack_told


def request_digest(req: Ask | Tell | Observe) -> str:
    """What makes two requests with the same id the same request."""
    if isinstance(req, Tell):
        key = (req.type, req.plant, req.proposal_id, req.measurement, req.failed)
    elif isinstance(req, Observe):
        key = (req.type, req.plant, sorted(req.gains.items()), req.measurement)
    else:
        key = (req.type, req.plant)
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def cached_reply(state: PlantState, req: Ask | Tell | Observe) -> dict[str, Any] | None:
    """The reply fields cached for `req`'s id, or None; a different request under a used id is
    `bad_field`."""
    hit = state.cache.get(str(req.request_id))
    if hit is None:
        return None
    digest, reply = hit
    if digest != request_digest(req):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"request id {req.request_id!r} was already used for a different "
                            "request; use a fresh id for every new request", req.request_id)
    return reply


def refuse_tell(state: PlantState, req: Tell) -> dict[str, Any]:
    """For a tell whose proposal is not the pending one: the journaled reply of a resend whose
    reply left the request cache; otherwise raises the error that says why."""
    pid = req.proposal_id
    earlier = state.told_replies.get(pid)
    digest, reply = unpack_told(earlier) if earlier is not None else (None, None)
    if digest == request_digest(req):
        return reply
    if pid in state.told:
        raise ProtocolError(ErrorCode.DUPLICATE_TELL,
                            f"proposal {pid!r} was already told (step {state.told[pid]})",
                            req.request_id)
    if pid in state.abandoned:
        raise ProtocolError(ErrorCode.STALE_PROPOSAL,
                            f"proposal {pid!r} was abandoned after its timeout; ask again",
                            req.request_id)
    step = _issued_step(state, pid)
    if step is not None:
        raise ProtocolError(
            ErrorCode.STALE_PROPOSAL,
            f"proposal {pid!r} was issued for step {step}; the plant is at step "
            f"{state.strategy.t} and remembers the outcomes of its last {RECENT_IDS} "
            "proposals only; ask for a new proposal", req.request_id)
    raise ProtocolError(ErrorCode.UNKNOWN_PROPOSAL,
                        f"proposal {pid!r} is not the pending proposal of {state.name!r}"
                        + (f" (pending: {state.proposal['id']!r})" if state.proposal else ""),
                        req.request_id)


def proposal_id(state: PlantState) -> str:
    """The id of the next proposal: `NAME:t`, or `NAME:t.k` for the k-th reissue at step `t`
    (after a proposal of that step was abandoned)."""
    t = state.strategy.t
    return f"{state.name}:{t}" + (f".{state.issued_at_t}" if state.issued_at_t else "")


def _issued_step(state: PlantState, pid: Any) -> int | None:
    """The step of a proposal id this plant issued before its current step (`proposal_id`),
    else None."""
    prefix = f"{state.name}:"
    if not isinstance(pid, str) or not pid.startswith(prefix):
        return None
    step, _, again = pid[len(prefix):].partition(".")
    if not step.isdigit() or (again and not again.isdigit()):
        return None
    return int(step) if 1 <= int(step) < state.strategy.t else None
