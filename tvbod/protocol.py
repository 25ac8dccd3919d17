"""Protocol v1 between the tvbod daemon and plant adapters: msgpack maps over ZeroMQ.

Adapters import this module, so it depends on msgpack and the standard library only (no zmq, no
`tvbod.core`, no `tvbod.service`). `docs/protocol.md` is the full specification; in short:

Sockets and frames. The daemon binds a ROUTER; an adapter connects a DEALER (or a REQ). Seen from
the ROUTER, a request arrives as one of two envelopes and the reply goes back in the same shape::

    [identity, payload]          DEALER sending a single frame
    [identity, b"", payload]     REQ, or a DEALER emulating REQ with an empty delimiter frame

`split_envelope` checks that shape and `Envelope.reply_frames` rebuilds it for the reply. Any other
shape (no frames, more frames, a non-empty delimiter, an empty identity or payload) is
`malformed_frame`.

Messages. Each payload is exactly one msgpack map with str keys (packed with `use_bin_type=True`:
text is str, bytes are bin). Requests carry `v` (=1), `id` (str of 1..128 characters or int >= 0,
echoed in the reply) and `type`; replies carry `v`, `id`, `ok` and `type` (`"error"` on failure,
with `error: {code, message}`). Keys a reader does not know are ignored, so a later minor revision
may add fields without breaking older peers. Optional fields may be absent or nil.

`decode_request` validates a payload into a frozen dataclass (`Hello`, `Ask`, `Tell`, `Status`,
`Ping`, and the optional v1 additions `Best` and `Observe`) or raises `ProtocolError` carrying a stable `ErrorCode` and, when it could be read, the
request id, so the server can address the error reply. No pickle, ever.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, Mapping, Sequence

import msgpack

from tvbod.errors import TvbodError

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024
"""Largest request payload the daemon reads; larger ones get `too_large`."""
MAX_REPLY_BYTES = 1024 * 1024
"""Largest reply payload `decode_reply` accepts (a status reply for many plants is the big one)."""
MAX_STR_BYTES = 4096
"""Longest str or bin anywhere in a request (msgpack length, in bytes)."""
MAX_ITEMS = 64
"""Most entries of any array or map in a request."""
MAX_ID_CHARS = 128
MAX_TEXT_CHARS = 128
"""Longest `adapter`, `adapter_version` and `proposal_id` string."""
MAX_METADATA_ENTRIES = 32
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_STR_CHARS = 256
MAX_DEPTH = 16
"""Deepest nesting of maps/arrays in any message (the top-level map is depth 1)."""
PLANT_NAME_PATTERN = r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}"
"""Plant names: 1..64 of `[A-Za-z0-9_.-]`, not starting with a dot (so never `.` or `..`)."""
_PLANT_RE = re.compile(PLANT_NAME_PATTERN)
_ID_EXPECTED = f"a str of 1..{MAX_ID_CHARS} characters or an int in [0, 2**64 - 1]"
_UINT64_MAX = 2**64 - 1


class ErrorCode(StrEnum):
    """Stable error codes of protocol v1; the wire carries the string value."""

    MALFORMED_FRAME = "malformed_frame"
    NOT_MSGPACK = "not_msgpack"
    NOT_A_MAP = "not_a_map"
    UNKNOWN_TYPE = "unknown_type"
    BAD_FIELD = "bad_field"
    VERSION_MISMATCH = "version_mismatch"
    UNKNOWN_PLANT = "unknown_plant"
    UNKNOWN_PROPOSAL = "unknown_proposal"
    STALE_PROPOSAL = "stale_proposal"
    DUPLICATE_TELL = "duplicate_tell"
    NON_FINITE = "non_finite"
    TOO_LARGE = "too_large"
    OUT_OF_BOUNDS = "out_of_bounds"
    PLANT_CLAIMED = "plant_claimed"
    PROPOSAL_PENDING = "proposal_pending"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    OVERLOADED = "overloaded"
    INTERNAL = "internal"

    @property
    def default_message(self) -> str:
        """A human sentence for this code, used when the raiser gives none."""
        return _DEFAULT_MESSAGES[self]

    @property
    def retryable(self) -> bool:
        """True when resending the same request (same id) after a pause may succeed."""
        return self in _RETRYABLE


_DEFAULT_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.MALFORMED_FRAME: "the frames are not [identity, payload] or [identity, '', payload]",
    ErrorCode.NOT_MSGPACK: "the payload is not one well-formed msgpack value (str keys, no ext)",
    ErrorCode.NOT_A_MAP: "the payload is msgpack but not a map",
    ErrorCode.UNKNOWN_TYPE: "the request type is not one of hello, ask, tell, status, ping, best, "
                            "observe",
    ErrorCode.BAD_FIELD: "a field is missing or has the wrong type",
    ErrorCode.VERSION_MISMATCH: f"this daemon speaks protocol version {PROTOCOL_VERSION} only",
    ErrorCode.UNKNOWN_PLANT: "no plant with this name is configured",
    ErrorCode.UNKNOWN_PROPOSAL: "no proposal with this id was ever issued for this plant",
    ErrorCode.STALE_PROPOSAL: "the proposal was abandoned (not told in time); ask again",
    ErrorCode.DUPLICATE_TELL: "this proposal was already told under another request id",
    ErrorCode.NON_FINITE: "the measurement is NaN or infinite; send failed=true instead",
    ErrorCode.TOO_LARGE: "the message or one of its fields exceeds the size limits",
    ErrorCode.OUT_OF_BOUNDS: "a value is outside the range the daemon accepts for this plant",
    ErrorCode.PLANT_CLAIMED: "another adapter is driving this plant",
    ErrorCode.PROPOSAL_PENDING: "a proposal is pending; tell it (or let it time out) first",
    ErrorCode.STORAGE_UNAVAILABLE: "the daemon cannot persist state right now; retry later",
    ErrorCode.OVERLOADED: "the daemon is busy; retry later",
    ErrorCode.INTERNAL: "internal daemon error",
}
_RETRYABLE = frozenset({ErrorCode.STORAGE_UNAVAILABLE, ErrorCode.OVERLOADED, ErrorCode.INTERNAL})


class ProtocolError(TvbodError):
    """A message broke protocol v1; `request_id` is the offender's id if it could be read."""

    def __init__(
        self, code: ErrorCode | str, message: str | None = None, request_id: str | int | None = None
    ) -> None:
        self.code = ErrorCode(code)
        self.message = message if message is not None else self.code.default_message
        self.request_id = request_id
        super().__init__(f"{self.code.value}: {self.message}")

    def to_reply(self) -> dict[str, Any]:
        """The error reply map that answers the offending request."""
        return error_reply(self.request_id, self.code, self.message)


@dataclass(frozen=True)
class Envelope:
    """A request as a ROUTER received it: who sent it, in which envelope shape, and the payload."""

    identity: bytes
    delimited: bool
    payload: bytes

    def reply_frames(self, payload: bytes) -> list[bytes]:
        """Frames for the ROUTER to send back: the request's envelope shape around `payload`."""
        if self.delimited:
            return [self.identity, b"", payload]
        return [self.identity, payload]


def split_envelope(frames: Sequence[bytes]) -> Envelope:
    """Split ROUTER-received frames into an `Envelope`; anything but the two shapes is rejected."""
    parts = [bytes(f) for f in frames]
    if len(parts) == 2:
        identity, payload, delimited = parts[0], parts[1], False
    elif len(parts) == 3:
        if parts[1]:
            raise ProtocolError(ErrorCode.MALFORMED_FRAME, "the middle of 3 frames must be empty")
        identity, payload, delimited = parts[0], parts[2], True
    else:
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, f"expected 2 or 3 frames, got {len(parts)}")
    if not identity:
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, "the identity frame is empty")
    if not payload:
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, "the payload frame is empty")
    return Envelope(identity=identity, delimited=delimited, payload=payload)


def _is_int(value: object) -> bool:
    # bool is an int subclass in Python; on the wire true/false are never numbers.
    return isinstance(value, int) and not isinstance(value, bool)


def is_valid_request_id(value: object) -> bool:
    """True for a str of 1..128 characters or an int in `[0, 2**64 - 1]`."""
    if isinstance(value, str):
        return 1 <= len(value) <= MAX_ID_CHARS
    return _is_int(value) and 0 <= value <= _UINT64_MAX  # type: ignore[operator]


def is_valid_plant_name(value: object) -> bool:
    """True for a str matching `PLANT_NAME_PATTERN` (safe as a directory name)."""
    return isinstance(value, str) and _PLANT_RE.fullmatch(value) is not None


def _bad(rid: str | int | None, name: str, expected: str, value: object) -> ProtocolError:
    got = "missing" if value is None else f"got {_wire_type(value)}"
    if isinstance(value, str):
        got = f"got {value[:40]!r}"
    return ProtocolError(ErrorCode.BAD_FIELD, f"field {name!r} must be {expected} ({got})", rid)


_WIRE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bin", list: "array"}


def _wire_type(value: object) -> str:
    return "map" if isinstance(value, dict) else _WIRE_NAMES.get(type(value), type(value).__name__)


def _too_large(rid: str | int | None, message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.TOO_LARGE, message, rid)


def _check_text(rid: str | int | None, name: str, value: object, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise _bad(rid, name, "a non-empty str", value)
    if len(value) > MAX_TEXT_CHARS:
        raise _too_large(rid, f"field {name!r} exceeds {MAX_TEXT_CHARS} characters")


def _check_plant(rid: str | int | None, value: object, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not is_valid_plant_name(value):
        raise _bad(rid, "plant", f"a str matching {PLANT_NAME_PATTERN}", value)


def _check_metadata(rid: str | int | None, value: object) -> None:
    if not isinstance(value, dict):
        raise _bad(rid, "metadata", "a map of str to nil/bool/int/float/str", value)
    if len(value) > MAX_METADATA_ENTRIES:
        raise _too_large(rid, f"metadata has more than {MAX_METADATA_ENTRIES} entries")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_METADATA_KEY_CHARS:
            raise _bad(rid, "metadata", f"keyed by str of 1..{MAX_METADATA_KEY_CHARS} chars", key)
        if isinstance(item, str) and len(item) > MAX_METADATA_STR_CHARS:
            raise _too_large(rid, f"metadata[{key!r}] exceeds {MAX_METADATA_STR_CHARS} characters")
        if item is not None and not isinstance(item, (bool, int, float, str)):
            raise _bad(rid, f"metadata[{key!r}]", "nil, bool, int, float or str", item)


@dataclass(frozen=True)
class _Request:
    """Fields every request has. Subclasses validate themselves in `__post_init__`."""

    type: ClassVar[str]
    request_id: str | int

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
class Hello(_Request):
    """`hello`: an adapter announces itself for `plant` and learns its parameters."""

    type: ClassVar[str] = "hello"
    plant: str
    adapter: str | None = None
    adapter_version: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant)
        _check_text(self.request_id, "adapter", self.adapter, optional=True)
        _check_text(self.request_id, "adapter_version", self.adapter_version, optional=True)


@dataclass(frozen=True)
class Ask(_Request):
    """`ask`: request the next gains to try on `plant` (the pending proposal if there is one).

    `adapter` (optional) names the sender, as in `hello`: the daemon lets one adapter drive a
    plant at a time (`plant_claimed`)."""

    type: ClassVar[str] = "ask"
    plant: str
    adapter: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant)
        _check_text(self.request_id, "adapter", self.adapter, optional=True)


@dataclass(frozen=True)
class Tell(_Request):
    """`tell`: the measured cost of proposal `proposal_id`, or `failed=True` if the run failed.

    `measurement` is a finite float unless `failed`; with `failed` it is kept only if finite (for
    the event log), otherwise None. `failed` and `metadata` accept None and mean their defaults.
    """

    type: ClassVar[str] = "tell"
    plant: str
    proposal_id: str
    measurement: float | None = None
    failed: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    adapter: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        rid = self.request_id
        _check_sender(self)
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


def _check_sender(req) -> None:
    """The `plant` and optional `adapter` fields of a measurement-carrying request."""
    _check_plant(req.request_id, req.plant)
    _check_text(req.request_id, "adapter", req.adapter, optional=True)


def _check_measurement_metadata(req) -> None:
    """`metadata`: None means `{}`; then the map is checked (`_check_metadata`)."""
    object.__setattr__(req, "metadata", {} if req.metadata is None else req.metadata)
    _check_metadata(req.request_id, req.metadata)


@dataclass(frozen=True)
class Status(_Request):
    """`status`: counters and latencies of one plant, or of all plants when `plant` is None."""

    type: ClassVar[str] = "status"
    plant: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant, optional=True)


@dataclass(frozen=True)
class Ping(_Request):
    """`ping`: liveness check; the reply carries `pong` and the daemon's clock."""

    type: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Best(_Request):
    """`best` (optional v1 addition): the gains the daemon recommends for `plant` now."""

    type: ClassVar[str] = "best"
    plant: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_plant(self.request_id, self.plant)


@dataclass(frozen=True)
class Observe(_Request):
    """`observe` (optional v1 addition): a finite `measurement` taken elsewhere at `gains`
    (`{parameter name: number}`, every parameter of the plant), journaled like a tell."""

    type: ClassVar[str] = "observe"
    plant: str
    gains: dict[str, Any] = field(default_factory=dict)
    measurement: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    adapter: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        rid = self.request_id
        _check_sender(self)
        _check_measurement_metadata(self)
        gains = self.gains
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
REQUEST_TYPES: dict[str, type[_Request]] = {
    c.type: c for c in (Hello, Ask, Tell, Status, Ping, Best, Observe)}


class _ExtRejected(TvbodError):
    pass


def _reject_ext(code: int, data: bytes) -> object:
    raise _ExtRejected(code)


def _not_msgpack(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NOT_MSGPACK, message)


def _unpack(payload: bytes, max_bytes: int, max_str: int, max_items: int) -> object:
    """msgpack-decode one value with hard limits; every failure becomes a `ProtocolError`."""
    if len(payload) > max_bytes:
        raise _too_large(None, f"payload of {len(payload)} bytes exceeds {max_bytes}")
    try:
        value = msgpack.unpackb(
            payload, raw=False, strict_map_key=True, use_list=True, ext_hook=_reject_ext,
            max_str_len=max_str, max_bin_len=max_str, max_array_len=max_items,
            max_map_len=max_items, max_ext_len=max_str,
        )
    except _ExtRejected as exc:
        raise _not_msgpack(f"msgpack ext type {exc.args[0]} is not allowed") from None
    except msgpack.ExtraData:
        raise _not_msgpack("trailing bytes after the msgpack value") from None
    except msgpack.StackError:
        raise _too_large(None, f"nesting deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # msgpack raises ValueError, UnicodeDecodeError, TypeError, ...
        if "exceeds max_" in str(exc):
            raise _too_large(None, str(exc)) from None
        raise _not_msgpack(f"not msgpack: {exc or type(exc).__name__}") from None
    _check_tree(value)
    return value


def _check_tree(value: object) -> None:
    """Reject what `unpackb` lets through: bin map keys, timestamps (ext -1), deep nesting."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth > MAX_DEPTH:
            raise _too_large(None, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise _not_msgpack("map keys must be str")
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, msgpack.Timestamp):
            raise _not_msgpack("msgpack ext type -1 (timestamp) is not allowed")


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


def encode(msg: Mapping[str, Any]) -> bytes:
    """Pack one message map as msgpack (`use_bin_type=True`: str as str, bytes as bin)."""
    return msgpack.packb(dict(msg), use_bin_type=True)


_RESERVED = frozenset({"v", "id", "ok", "type", "error"})


def ok_reply(request_id: str | int, reply_type: str, /, **fields: Any) -> dict[str, Any]:
    """A success reply map: `{v, id, ok: true, type, **fields}`."""
    if reply_type not in REQUEST_TYPES:
        raise ValueError(f"reply type {reply_type!r} is not one of {sorted(REQUEST_TYPES)}")
    clash = _RESERVED.intersection(fields)
    if clash:
        raise ValueError(f"reply fields may not be named {sorted(clash)}")
    return {"v": PROTOCOL_VERSION, "id": request_id, "ok": True, "type": reply_type, **fields}


def error_reply(
    request_id: str | int | None, code: ErrorCode | str, message: str | None = None
) -> dict[str, Any]:
    """An error reply map; `message` defaults to the code's default sentence."""
    code = ErrorCode(code)
    text = message if message is not None else code.default_message
    return {
        "v": PROTOCOL_VERSION, "id": request_id, "ok": False, "type": "error",
        "error": {"code": code.value, "message": text},
    }


@dataclass(frozen=True)
class _Reply:
    """A success reply, typed: the daemon builds one per request (with the request's id) and
    encodes it with `to_message`; clients may read a decoded map back with `parse_reply`.
    The wire map is `{v, id, ok: true, type, **fields in declaration order}`."""

    type: ClassVar[str]
    request_id: str | int

    def body(self) -> dict[str, Any]:
        """The type-specific fields, in wire order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "request_id"}

    def to_message(self) -> dict[str, Any]:
        return ok_reply(self.request_id, self.type, **self.body())

    @classmethod
    def from_body(cls, request_id: str | int, body: Mapping[str, Any], **overrides: Any):
        """The reply built from a map of its fields (keys it does not know are ignored)."""
        names = [f.name for f in fields(cls) if f.name != "request_id"]
        return cls(request_id, **{**{n: body.get(n) for n in names if n in body}, **overrides})


@dataclass(frozen=True)
class HelloReply(_Reply):
    """`hello`: the plant's parameters, sense, next step and pending proposal (or None)."""

    type: ClassVar[str] = "hello"
    plant: str
    parameters: list[dict[str, Any]]
    sense: str
    t: int
    pending: dict[str, Any] | None


@dataclass(frozen=True)
class AskReply(_Reply):
    """`ask`: the proposal to run (the pending one again until it is told or abandoned)."""

    type: ClassVar[str] = "ask"
    proposal_id: str
    gains: dict[str, Any]
    t: int


@dataclass(frozen=True)
class TellReply(_Reply):
    """`tell`: what the trigger decided for the measurement (`duplicate`: a resend's answer)."""

    type: ClassVar[str] = "tell"
    t: int
    reset: bool
    psi: float
    threshold: float
    dataset_size: int
    measurement: float
    failed: bool
    duplicate: bool = False


@dataclass(frozen=True)
class ObserveReply(TellReply):
    """`observe`: as a tell's reply."""

    type: ClassVar[str] = "observe"


@dataclass(frozen=True)
class BestReply(_Reply):
    """`best`: the recommended gains now, their predicted measurement and std (None: no data)."""

    type: ClassVar[str] = "best"
    plant: str
    t: int
    dataset_size: int
    sense: str
    rule: str
    gains: dict[str, Any] | None = None
    mean: float | None = None
    std: float | None = None
    measured_at: int | None = None


@dataclass(frozen=True)
class StatusReply(_Reply):
    """`status`: one entry per plant and the daemon's own counters."""

    type: ClassVar[str] = "status"
    plants: list[dict[str, Any]]
    daemon: dict[str, Any]


@dataclass(frozen=True)
class PingReply(_Reply):
    """`ping`: liveness, with the daemon's clock."""

    type: ClassVar[str] = "ping"
    pong: bool
    time: float


Reply = HelloReply | AskReply | TellReply | ObserveReply | BestReply | StatusReply | PingReply
REPLY_TYPES: dict[str, type[_Reply]] = {
    c.type: c for c in (HelloReply, AskReply, TellReply, ObserveReply, BestReply, StatusReply,
                        PingReply)}


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
