"""Protocol v1, the wire: limits, error codes, the ZeroMQ envelope, msgpack decoding and the field
checks requests and replies share (docs/protocol.md sections 1-3 and 5)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
import re
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
    PLANT_UNAVAILABLE = "plant_unavailable"
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
    ErrorCode.PLANT_UNAVAILABLE: "the plant is quarantined: its saved state could not be restored "
                                 "(see `tvbod inspect` and `tvbod repair`)",
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


@dataclass(frozen=True)
class _Message:
    """What every request and success reply shares: the request id, and the wire `type` a message
    class names in its header (`class Ping(_Request, type="ping")`), which also enters the class
    in its family's registry (`REQUEST_TYPES`, `REPLY_TYPES`)."""

    type: ClassVar[str]
    _registry: ClassVar[dict[str, Any]]
    request_id: str | int

    def __init_subclass__(cls, /, type: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if type is not None:  # None: a family's base (`_Request`, `_Reply`), not a message
            cls.type = type
            cls._registry[type] = cls


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


def encode(msg: Mapping[str, Any]) -> bytes:
    """Pack one message map as msgpack (`use_bin_type=True`: str as str, bytes as bin)."""
    return msgpack.packb(dict(msg), use_bin_type=True)
