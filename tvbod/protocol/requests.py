"""Protocol v1 requests: one frozen dataclass per request type, validated by `decode_request`
(docs/protocol.md section 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from tvbod.protocol.wire import (
    ErrorCode, is_valid_request_id, MAX_ITEMS, MAX_MESSAGE_BYTES, MAX_STR_BYTES, PROTOCOL_VERSION, ProtocolError, _bad, _check_metadata, _check_plant, _check_text, _ID_EXPECTED, _is_int, _Message, _unpack, _wire_type,
)

#: Request type -> its class, in declaration order (each class enters itself, `_Message`).
REQUEST_TYPES: dict[str, type[_Request]] = {}


@dataclass(frozen=True)
class _Request(_Message):
    """Fields every request has. Subclasses validate themselves in `__post_init__`."""

    _registry = REQUEST_TYPES

    def __post_init__(self) -> None:
        if not is_valid_request_id(self.request_id):
            raise _bad(None, "id", _ID_EXPECTED, self.request_id)

    def to_message(self) -> dict[str, Any]:
        """The request as a wire map (for clients); optional fields that are None are left out."""
        return request_message(self.type, self.request_id, **{
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "request_id"})


def request_message(request_type: str, request_id: str | int, /, **fields: Any) -> dict[str, Any]:
    """The one way a request map is built (`{v, id, type, **fields}`; None fields left out):
    `_Request.to_message`, the reference client and the benches all use it."""
    return {"v": PROTOCOL_VERSION, "id": request_id, "type": request_type,
            **{k: v for k, v in fields.items() if v is not None}}


@dataclass(frozen=True)
class _FromAdapter(_Request):
    """A request an adapter sends for its `plant` (`hello`, `ask`, `tell`, `observe`): `plant` comes
    first, and each declares `adapter` (optional, names the sender) among its optional fields."""

    plant: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant)
        _check_text(self.request_id, "adapter", self.adapter, optional=True)


@dataclass(frozen=True)
class Hello(_FromAdapter, type="hello"):
    """`hello`: an adapter announces itself for `plant` and learns its parameters."""

    adapter: str | None = None
    adapter_version: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_text(self.request_id, "adapter_version", self.adapter_version, optional=True)


@dataclass(frozen=True)
class Ask(_FromAdapter, type="ask"):
    """`ask`: request the next gains to try on `plant` (the pending proposal if there is one).

    `adapter` (optional) names the sender, as in `hello`: the daemon lets one adapter drive a
    plant at a time (`plant_claimed`)."""

    adapter: str | None = None


@dataclass(frozen=True)
class Tell(_FromAdapter, type="tell"):
    """`tell`: the measured cost of proposal `proposal_id`, or `failed=True` if the run failed.

    `measurement` is a finite float unless `failed`; with `failed` it is kept only if finite (for
    the event log), otherwise None. `failed` and `metadata` accept None and mean their defaults.
    """

    proposal_id: str
    measurement: float | None = None
    failed: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    adapter: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        rid = self.request_id
        _check_text(rid, "proposal_id", self.proposal_id, optional=False)
        failed = False if self.failed is None else self.failed
        if not isinstance(failed, bool):
            raise _bad(rid, "failed", "a bool", failed)
        object.__setattr__(self, "failed", failed)
        _check_measurement_metadata(self)
        value = self.measurement
        if value is None and failed:
            return
        if not (isinstance(value, float) or _is_int(value)):
            raise _bad(rid, "measurement", "a float or int (nil only when failed is true)", value)
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            if not failed:
                raise ProtocolError(ErrorCode.NON_FINITE, f"measurement is {number}", rid)
            number = None  # type: ignore[assignment]
        object.__setattr__(self, "measurement", number)


def _check_measurement_metadata(req) -> None:
    """`metadata`: None means `{}`; then the map is checked (`_check_metadata`)."""
    object.__setattr__(req, "metadata", {} if req.metadata is None else req.metadata)
    _check_metadata(req.request_id, req.metadata)


@dataclass(frozen=True)
class Status(_Request, type="status"):
    """`status`: counters and latencies of one plant, or of all plants when `plant` is None."""

    plant: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant, optional=True)


@dataclass(frozen=True)
class Ping(_Request, type="ping"):
    """`ping`: liveness check; the reply carries `pong` and the daemon's clock."""


@dataclass(frozen=True)
class Best(_Request, type="best"):
    """`best` (optional v1 addition): the gains the daemon recommends for `plant` now."""

    plant: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant)


@dataclass(frozen=True)
class Observe(_FromAdapter, type="observe"):
    """`observe` (optional v1 addition): a finite `measurement` taken elsewhere at `gains`
    (`{parameter name: number}`, every parameter of the plant), journaled like a tell."""

    gains: dict[str, Any] = field(default_factory=dict)
    measurement: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    adapter: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_measurement_metadata(self)
        rid, gains = self.request_id, self.gains
        if not isinstance(gains, dict) or not gains:
            raise _bad(rid, "gains", "a non-empty map of parameter name to number", gains)
        for key, value in gains.items():
            if not (isinstance(value, float) or _is_int(value)):
                raise _bad(rid, f"gains[{key[:40]!r}]", "a float or int", value)
            if not math.isfinite(float(value)):
                raise ProtocolError(ErrorCode.NON_FINITE, f"gains[{key[:40]!r}] is {value}", rid)
        value = self.measurement
        if not (isinstance(value, float) or _is_int(value)):
            raise _bad(rid, "measurement", "a float or int", value)
        if not math.isfinite(float(value)):  # type: ignore[arg-type]
            raise ProtocolError(ErrorCode.NON_FINITE, f"measurement is {value}", rid)
        object.__setattr__(self, "measurement", float(value))  # type: ignore[arg-type]


Request = Hello | Ask | Tell | Status | Ping | Best | Observe


def decode_request(payload: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> Request:
    """Validate one request payload into its dataclass, or raise `ProtocolError`.

    Checks, in order: size, msgpack well-formedness, map, `v`, `id`, `type`, then the type's fields.
    From the `v` check on, the error carries the request id if the `id` field is valid.
    """
    msg = _unpack(payload, max_bytes, max_str=MAX_STR_BYTES, max_items=MAX_ITEMS)
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.NOT_A_MAP, f"the payload is a {_wire_type(msg)}, not a map")
    raw_id = msg.get("id")
    rid = raw_id if is_valid_request_id(raw_id) else None
    version = msg.get("v")
    if not _is_int(version):
        raise _bad(rid, "v", f"the int {PROTOCOL_VERSION}", version)
    if version != PROTOCOL_VERSION:
        text = f"protocol version {version} is not supported; use {PROTOCOL_VERSION}"
        raise ProtocolError(ErrorCode.VERSION_MISMATCH, text, rid)
    if rid is None:
        raise _bad(None, "id", _ID_EXPECTED, raw_id)
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise _bad(rid, "type", "a str", kind)
    cls = REQUEST_TYPES.get(kind)
    if cls is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown request type {kind[:32]!r}", rid)
    kwargs = {f.name: msg.get(f.name) for f in fields(cls) if f.name != "request_id"}
    return cls(request_id=rid, **kwargs)  # type: ignore[return-value]
