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

The package: `wire.py` (limits, codes, envelope, msgpack), `requests.py`, `replies.py`."""

from __future__ import annotations

from tvbod.protocol.wire import (  # noqa: F401
    error_reply,
    PROTOCOL_VERSION,
    MAX_MESSAGE_BYTES,
    MAX_REPLY_BYTES,
    MAX_STR_BYTES,
    MAX_ITEMS,
    MAX_ID_CHARS,
    MAX_TEXT_CHARS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_STR_CHARS,
    MAX_DEPTH,
    PLANT_NAME_PATTERN,
    ErrorCode,
    ProtocolError,
    Envelope,
    split_envelope,
    is_valid_request_id,
    is_valid_plant_name,
    encode,
)
from tvbod.protocol.requests import (  # noqa: F401
    request_message,
    Hello,
    Ask,
    Tell,
    Status,
    Ping,
    Best,
    Observe,
    Request,
    REQUEST_TYPES,
    decode_request,
)
from tvbod.protocol.replies import (  # noqa: F401
    ok_reply,
    HelloReply,
    AskReply,
    TellReply,
    ObserveReply,
    BestReply,
    StatusReply,
    PingReply,
    Reply,
    REPLY_TYPES,
    parse_reply,
    decode_reply,
)

__all__ = [
    'PROTOCOL_VERSION',
    'MAX_MESSAGE_BYTES',
    'MAX_REPLY_BYTES',
    'MAX_STR_BYTES',
    'MAX_ITEMS',
    'MAX_ID_CHARS',
    'MAX_TEXT_CHARS',
    'MAX_METADATA_ENTRIES',
    'MAX_METADATA_KEY_CHARS',
    'MAX_METADATA_STR_CHARS',
    'MAX_DEPTH',
    'PLANT_NAME_PATTERN',
    'ErrorCode',
    'ProtocolError',
    'Envelope',
    'split_envelope',
    'is_valid_request_id',
    'is_valid_plant_name',
    'encode',
    'request_message',
    'Hello',
    'Ask',
    'Tell',
    'Status',
    'Ping',
    'Best',
    'Observe',
    'Request',
    'REQUEST_TYPES',
    'decode_request',
    'ok_reply',
    'error_reply',
    'HelloReply',
    'AskReply',
    'TellReply',
    'ObserveReply',
    'BestReply',
    'StatusReply',
    'PingReply',
    'Reply',
    'REPLY_TYPES',
    'parse_reply',
    'decode_reply',
]
