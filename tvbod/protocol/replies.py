"""Protocol v1 replies: typed frozen replies the daemon builds, `ok_reply` / `error_reply` maps and
`decode_reply` for clients (docs/protocol.md sections 4-5)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping

from tvbod.protocol.wire import (
    ErrorCode, is_valid_request_id, MAX_MESSAGE_BYTES, MAX_REPLY_BYTES, PROTOCOL_VERSION, ProtocolError, _bad, _is_int, _Message, _unpack, _wire_type,
)
from tvbod.protocol.requests import REQUEST_TYPES


_RESERVED = frozenset({"v", "id", "ok", "type", "error"})


def ok_reply(request_id: str | int, reply_type: str, /, **fields: Any) -> dict[str, Any]:
    """A success reply map: `{v, id, ok: true, type, **fields}`."""
    if reply_type not in REQUEST_TYPES:
        raise ValueError(f"reply type {reply_type!r} is not one of {sorted(REQUEST_TYPES)}")
    clash = _RESERVED.intersection(fields)
    if clash:
        raise ValueError(f"reply fields may not be named {sorted(clash)}")
    return {"v": PROTOCOL_VERSION, "id": request_id, "ok": True, "type": reply_type, **fields}


#: Reply type -> its class, in declaration order (each class enters itself, `_Message`).
REPLY_TYPES: dict[str, type[_Reply]] = {}


@dataclass(frozen=True)
class _Reply(_Message):
    """A success reply, typed: the daemon builds one per request (with the request's id) and
    encodes it with `to_message`; clients may read a decoded map back with `parse_reply`.
    The wire map is `{v, id, ok: true, type, **fields in declaration order}`."""

    _registry = REPLY_TYPES

    def body(self) -> dict[str, Any]:
        """The type-specific fields, in wire order; a field added after tvbod 0.2.0 (metadata
        `omit_none`) only when it has a value, so replies without it keep their 0.2.0 bytes."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "request_id"
                and not (f.metadata.get("omit_none") and getattr(self, f.name) is None)}

    def to_message(self) -> dict[str, Any]:
        return ok_reply(self.request_id, self.type, **self.body())

    @classmethod
    def from_body(cls, request_id: str | int, body: Mapping[str, Any], **overrides: Any):
        """The reply built from a map of its fields (keys it does not know are ignored)."""
        names = [f.name for f in fields(cls) if f.name != "request_id"]
        return cls(request_id, **{**{n: body.get(n) for n in names if n in body}, **overrides})


@dataclass(frozen=True)
class HelloReply(_Reply, type="hello"):
    """`hello`: the plant's parameters, sense, next step and pending proposal (or None)."""

    plant: str
    parameters: list[dict[str, Any]]
    sense: Literal["minimize", "maximize"]
    t: int
    pending: dict[str, Any] | None


@dataclass(frozen=True)
class AskReply(_Reply, type="ask"):
    """`ask`: the proposal to run (the pending one again until it is told or abandoned)."""

    proposal_id: str
    gains: dict[str, Any]
    t: int


@dataclass(frozen=True)
class TellReply(_Reply, type="tell"):
    """`tell`: what the trigger decided for the measurement (`duplicate`: a resend's answer)."""

    t: int
    reset: bool
    psi: float
    threshold: float
    dataset_size: int
    measurement: float
    failed: bool
    duplicate: bool = False


@dataclass(frozen=True)
class ObserveReply(TellReply, type="observe"):
    """`observe`: as a tell's reply."""


@dataclass(frozen=True)
class BestReply(_Reply, type="best"):
    """`best`: the recommended gains now, their predicted measurement and std (None: no data)."""

    plant: str
    t: int
    dataset_size: int
    sense: Literal["minimize", "maximize"]
    rule: str
    gains: dict[str, Any] | None = None
    mean: float | None = None
    std: float | None = None
    measured_at: int | None = None
    #: plants with `safety:`: whether the safe set certifies the gains
    certified: bool | None = field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class StatusReply(_Reply, type="status"):
    """`status`: one entry per plant and the daemon's own counters."""

    plants: list[dict[str, Any]]
    daemon: dict[str, Any]


@dataclass(frozen=True)
class PingReply(_Reply, type="ping"):
    """`ping`: liveness, with the daemon's clock."""

    pong: bool
    time: float


Reply = HelloReply | AskReply | TellReply | ObserveReply | BestReply | StatusReply | PingReply


def parse_reply(msg: Mapping[str, Any]) -> Reply:
    """A decoded success reply map (`decode_reply`) as its typed reply."""
    return REPLY_TYPES[msg["type"]].from_body(msg["id"], msg)  # type: ignore[return-value]


def decode_reply(payload: bytes, max_bytes: int = MAX_REPLY_BYTES) -> dict[str, Any]:
    """Decode and check a reply's envelope fields (`v`, `id`, `ok`, `type`, `error`) for clients.

    Error codes unknown to this version are kept as strings, so a newer daemon does not break an
    older adapter; the type-specific fields are returned as sent.
    """
    msg = _unpack(payload, max_bytes, max_str=MAX_MESSAGE_BYTES, max_items=4096)
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.NOT_A_MAP, f"the reply is a {_wire_type(msg)}, not a map")
    rid = msg.get("id")
    if rid is not None and not is_valid_request_id(rid):
        raise _bad(None, "id", "a request id or nil", rid)
    version = msg.get("v")
    if not _is_int(version):
        raise _bad(rid, "v", f"the int {PROTOCOL_VERSION}", version)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(ErrorCode.VERSION_MISMATCH, f"reply has version {version}", rid)
    if not isinstance(msg.get("ok"), bool):
        raise _bad(rid, "ok", "a bool", msg.get("ok"))
    if not isinstance(msg.get("type"), str):
        raise _bad(rid, "type", "a str", msg.get("type"))
    if not msg["ok"]:
        error = msg.get("error")
        if msg["type"] != "error" or not isinstance(error, dict):
            raise _bad(rid, "error", 'a map (with type "error")', error)
        if not isinstance(error.get("code"), str) or not isinstance(error.get("message"), str):
            raise _bad(rid, "error", "a map with str code and str message", error)
    return msg
