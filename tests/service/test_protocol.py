"""Protocol v1: envelopes, request validation (one test per error path), replies, fuzzing."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvbod.protocol import (
    MAX_MESSAGE_BYTES,
    MAX_METADATA_ENTRIES,
    PROTOCOL_VERSION,
    Ask,
    Envelope,
    ErrorCode,
    Hello,
    Ping,
    ProtocolError,
    Status,
    Tell,
    decode_reply,
    decode_request,
    encode,
    error_reply,
    ok_reply,
    split_envelope,
)


def req(**fields: object) -> bytes:
    """A request payload with `v` and `id` filled in unless overridden (None removes a key)."""
    msg = {"v": 1, "id": "r1", **fields}
    return encode({k: v for k, v in msg.items() if v is not None})


def tell(**fields: object) -> bytes:
    return req(**{"type": "tell", "plant": "cart", "proposal_id": "p1", "measurement": 1.5, **fields})


def code_of(payload: bytes) -> ErrorCode:
    with pytest.raises(ProtocolError) as info:
        decode_request(payload)
    return info.value.code


# --- envelopes --------------------------------------------------------------------------------


def test_dealer_envelope_is_identity_and_payload() -> None:
    env = split_envelope([b"id", b"payload"])
    assert env == Envelope(identity=b"id", delimited=False, payload=b"payload")
    assert env.reply_frames(b"reply") == [b"id", b"reply"]


def test_req_envelope_keeps_the_empty_delimiter_in_the_reply() -> None:
    env = split_envelope([b"id", b"", b"payload"])
    assert env.delimited and env.payload == b"payload"
    assert env.reply_frames(b"reply") == [b"id", b"", b"reply"]


@pytest.mark.parametrize(
    "frames",
    [[], [b"id"], [b"id", b"x", b"payload"], [b"id", b"", b"p", b"q"], [b"", b"payload"],
     [b"id", b""], [b"id", b"", b""]],
    ids=["none", "one", "non-empty-delimiter", "four", "empty-identity", "empty-payload",
         "delimited-empty-payload"],
)
def test_other_frame_shapes_are_malformed_frame(frames: list[bytes]) -> None:
    with pytest.raises(ProtocolError) as info:
        split_envelope(frames)
    assert info.value.code is ErrorCode.MALFORMED_FRAME


# --- round trips and echo ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_obj",
    [
        Hello(request_id="h-1", plant="cart", adapter="cartpole", adapter_version="0.1"),
        Hello(request_id=0, plant="cart"),
        Ask(request_id=2**64 - 1, plant="cart.v2"),
        Tell(request_id="t", plant="cart", proposal_id="p-7", measurement=-3.25,
             metadata={"note": "ok", "n": 3, "flag": True, "x": 0.5, "none": None}),
        Tell(request_id="t2", plant="cart", proposal_id="p-8", failed=True),
        Status(request_id="s"),
        Status(request_id="s", plant="cart"),
        Ping(request_id="x" * 128),
    ],
    ids=lambda r: type(r).__name__,
)
def test_each_request_type_round_trips(request_obj: object) -> None:
    assert decode_request(encode(request_obj.to_message())) == request_obj  # type: ignore[attr-defined]


def test_int_measurement_becomes_float() -> None:
    decoded = decode_request(tell(measurement=3))
    assert isinstance(decoded, Tell) and decoded.measurement == 3.0
    assert isinstance(decoded.measurement, float)


def test_failed_tell_may_omit_the_measurement_or_send_nan() -> None:
    # failed=true frees the measurement from the finiteness rule; a non-finite one becomes None.
    assert decode_request(tell(failed=True, measurement=None)).measurement is None  # type: ignore[union-attr]
    assert decode_request(tell(failed=True, measurement=float("nan"))).measurement is None  # type: ignore[union-attr]
    assert decode_request(tell(failed=True, measurement=2.0)).measurement == 2.0  # type: ignore[union-attr]


def test_nil_optional_fields_mean_absent() -> None:
    msg = {"v": 1, "id": 1, "type": "tell", "plant": "cart", "proposal_id": "p", "measurement": 1.0,
           "failed": None, "metadata": None}
    decoded = decode_request(encode(msg))
    assert isinstance(decoded, Tell) and decoded.failed is False and decoded.metadata == {}


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    decoded = decode_request(req(type="ping", future_field={"a": [1, 2]}, trace=b"\x00"))
    assert decoded == Ping(request_id="r1")


def test_ok_reply_echoes_the_request_id() -> None:
    reply = decode_reply(encode(ok_reply(42, "ask", proposal_id="p", gains={"kp": 1.0}, t=3)))
    assert reply == {"v": 1, "id": 42, "ok": True, "type": "ask", "proposal_id": "p",
                     "gains": {"kp": 1.0}, "t": 3}


def test_error_after_a_readable_id_carries_that_id_into_the_reply() -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(req(id="abc", type="ask"))  # no plant
    reply = decode_reply(encode(info.value.to_reply()))
    assert reply["id"] == "abc" and reply["ok"] is False and reply["type"] == "error"
    assert reply["error"]["code"] == "bad_field"


def test_error_before_the_id_is_readable_replies_with_nil_id() -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(b"\xc1")
    assert info.value.request_id is None
    assert decode_reply(encode(info.value.to_reply()))["id"] is None


# --- one test per error code ------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", b"\x81\xa1a", encode({"v": 1}) + b"\x00",
     msgpack.packb({"v": 1, "x": msgpack.ExtType(5, b"ab")}),
     msgpack.packb({"v": 1, "x": msgpack.Timestamp(1, 0)}, datetime=False),
     b"\x81\xa1a\xa2\xff\xfe", msgpack.packb({1: 2}), msgpack.packb({b"v": 1})],
    ids=["empty", "reserved-byte", "truncated", "trailing-data", "ext", "timestamp",
         "invalid-utf8", "int-key", "bin-key"],
)
def test_payloads_outside_the_msgpack_subset_are_not_msgpack(payload: bytes) -> None:
    assert code_of(payload) is ErrorCode.NOT_MSGPACK


@pytest.mark.parametrize("value", [[1, 2], "hello", 3, None, b"bin"])
def test_a_non_map_payload_is_not_a_map(value: object) -> None:
    assert code_of(msgpack.packb(value, use_bin_type=True)) is ErrorCode.NOT_A_MAP


def test_an_unknown_request_type_is_unknown_type() -> None:
    assert code_of(req(type="reboot")) is ErrorCode.UNKNOWN_TYPE


@pytest.mark.parametrize("version", [0, 2, 99])
def test_another_protocol_version_is_version_mismatch(version: int) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(req(v=version, type="ping"))
    assert info.value.code is ErrorCode.VERSION_MISMATCH and info.value.request_id == "r1"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (encode({"id": 1, "type": "ping"}), "'v'"),
        (req(v=True, type="ping"), "'v'"),
        (req(v=1.0, type="ping"), "'v'"),
        (req(id=None, type="ping"), "'id'"),
        (req(id="", type="ping"), "'id'"),
        (req(id="x" * 129, type="ping"), "'id'"),
        (req(id=-1, type="ping"), "'id'"),
        (req(id=True, type="ping"), "'id'"),
        (req(id=1.5, type="ping"), "'id'"),
        (req(type=None), "'type'"),
        (req(type=3), "'type'"),
        (req(type="hello"), "'plant'"),
        (req(type="hello", plant=""), "'plant'"),
        (req(type="hello", plant=".."), "'plant'"),
        (req(type="hello", plant="a/b"), "'plant'"),
        (req(type="hello", plant="x" * 65), "'plant'"),
        (req(type="hello", plant="cart", adapter=7), "'adapter'"),
        (req(type="hello", plant="cart", adapter_version=b"1"), "'adapter_version'"),
        (req(type="ask", plant=5), "'plant'"),
        (req(type="status", plant=["cart"]), "'plant'"),
        (tell(proposal_id=None), "'proposal_id'"),
        (tell(proposal_id=12), "'proposal_id'"),
        (tell(measurement=None), "'measurement'"),
        (tell(measurement="1.0"), "'measurement'"),
        (tell(measurement=True), "'measurement'"),
        (tell(failed=1), "'failed'"),
        (tell(metadata=[1]), "'metadata'"),
        (tell(metadata={"k": [1]}), "metadata['k']"),
        (tell(metadata={"k": {"a": 1}}), "metadata['k']"),
        (tell(metadata={"": 1}), "'metadata'"),
    ],
)
def test_missing_or_ill_typed_fields_are_bad_field_naming_the_field(payload: bytes, field: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(payload)
    assert info.value.code is ErrorCode.BAD_FIELD
    assert field in info.value.message and " must be " in info.value.message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_measurement_is_non_finite(value: float) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(tell(measurement=value))
    assert info.value.code is ErrorCode.NON_FINITE and info.value.request_id == "r1"


@pytest.mark.parametrize(
    "payload",
    [
        req(type="ping", pad="x" * MAX_MESSAGE_BYTES),
        req(type="ping", pad="x" * 5000),
        req(type="ping", pad=list(range(100))),
        req(type="ping", nested=[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]),
        b"\x91" * 3000 + b"\x01",
        tell(metadata={f"k{i}": i for i in range(MAX_METADATA_ENTRIES + 1)}),
        tell(metadata={"note": "x" * 257}),
        tell(proposal_id="p" * 129),
        req(type="hello", plant="cart", adapter="a" * 129),
    ],
    ids=["payload", "string", "array", "depth", "stack", "metadata-entries", "metadata-string",
         "proposal-id", "adapter"],
)
def test_oversized_messages_and_fields_are_too_large(payload: bytes) -> None:
    assert code_of(payload) is ErrorCode.TOO_LARGE


def test_a_payload_of_exactly_max_bytes_is_accepted_and_one_more_is_too_large() -> None:
    payload = req(type="ping", pad="x" * 3000)
    assert decode_request(payload, max_bytes=len(payload)) == Ping(request_id="r1")
    with pytest.raises(ProtocolError) as info:
        decode_request(payload, max_bytes=len(payload) - 1)
    assert info.value.code is ErrorCode.TOO_LARGE


# --- codes and replies ------------------------------------------------------------------------


def test_every_error_code_has_a_default_message_and_only_transient_ones_are_retryable() -> None:
    assert all(code.default_message for code in ErrorCode)
    assert {c for c in ErrorCode if c.retryable} == {
        ErrorCode.STORAGE_UNAVAILABLE, ErrorCode.OVERLOADED, ErrorCode.INTERNAL}


def test_error_reply_uses_the_default_message_when_none_is_given() -> None:
    reply = error_reply("r", "unknown_plant")
    assert reply["error"] == {"code": "unknown_plant",
                              "message": ErrorCode.UNKNOWN_PLANT.default_message}


def test_ok_reply_refuses_to_overwrite_envelope_keys() -> None:
    with pytest.raises(ValueError):
        ok_reply(1, "tell", ok=False)
    with pytest.raises(ValueError):
        ok_reply(1, "error")


@pytest.mark.parametrize(
    "reply",
    [{"v": 2, "id": 1, "ok": True, "type": "ping"},
     {"v": 1, "id": 1, "ok": 1, "type": "ping"},
     {"v": 1, "id": 1.5, "ok": True, "type": "ping"},
     {"v": 1, "id": 1, "ok": False, "type": "error"},
     {"v": 1, "id": 1, "ok": False, "type": "error", "error": {"code": 3, "message": "m"}}],
)
def test_decode_reply_rejects_broken_envelopes(reply: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        decode_reply(encode(reply))


def test_decode_reply_keeps_error_codes_it_does_not_know() -> None:
    reply = {"v": PROTOCOL_VERSION, "id": 1, "ok": False, "type": "error",
             "error": {"code": "from_the_future", "message": "m"}}
    assert decode_reply(encode(reply))["error"]["code"] == "from_the_future"


# --- fuzzing ----------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_raise_nothing_but_protocol_error(payload: bytes) -> None:
    try:
        decode_request(payload)
    except ProtocolError:
        pass


_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | \
    st.text(max_size=8) | st.binary(max_size=8)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
_keys = st.sampled_from(["v", "id", "type", "plant", "proposal_id", "measurement", "failed",
                         "metadata", "adapter", "adapter_version"])
_types = st.sampled_from(["hello", "ask", "tell", "status", "ping", "bogus"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values | _types, max_size=8))
def test_random_maps_decode_or_raise_protocol_error(msg: dict[str, object]) -> None:
    try:
        decoded = decode_request(msgpack.packb(msg, use_bin_type=True))
    except ProtocolError:
        return
    # Whatever decodes re-encodes to the same request (compared as bytes: NaN != NaN in metadata).
    again = decode_request(encode(decoded.to_message()))
    assert encode(again.to_message()) == encode(decoded.to_message())


def test_protocol_imports_neither_zmq_nor_the_service_nor_the_core() -> None:
    code = ("import sys, tvbod.protocol; "
            "print(sorted(m for m in sys.modules if m == 'zmq' or m.startswith(('tvbod.core', "
            "'tvbod.service', 'zmq.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the optional v1 additions: best, observe --------------------------------------------------


def observe(**fields: object) -> bytes:
    return req(**{"type": "observe", "plant": "cart", "gains": {"kp": 1.0, "ki": 2},
                  "measurement": 1.5, **fields})


def test_best_and_observe_decode_into_their_dataclasses() -> None:
    from tvbod.protocol import Best, Observe

    assert decode_request(req(type="best", plant="cart")) == Best(request_id="r1", plant="cart")
    o = decode_request(observe(metadata={"lab": "b"}))
    assert isinstance(o, Observe) and o.gains == {"kp": 1.0, "ki": 2}
    assert o.measurement == 1.5 and o.metadata == {"lab": "b"}
    assert isinstance(decode_request(observe(measurement=3)).measurement, float)


@pytest.mark.parametrize(("payload", "code"), [
    (req(type="best"), ErrorCode.BAD_FIELD),                                  # no plant
    (req(type="best", plant="../x"), ErrorCode.BAD_FIELD),
    (observe(gains=None), ErrorCode.BAD_FIELD),
    (observe(gains={}), ErrorCode.BAD_FIELD),
    (observe(gains=[1.0, 2.0]), ErrorCode.BAD_FIELD),
    (observe(gains={"kp": True}), ErrorCode.BAD_FIELD),                        # bool is no number
    (observe(gains={"kp": "1"}), ErrorCode.BAD_FIELD),
    (observe(gains={"kp": float("nan")}), ErrorCode.NON_FINITE),
    (observe(measurement=None), ErrorCode.BAD_FIELD),
    (observe(measurement=float("inf")), ErrorCode.NON_FINITE),
    (observe(metadata=[1]), ErrorCode.BAD_FIELD),
])
def test_bad_best_and_observe_requests_get_their_error_code(payload, code) -> None:
    assert code_of(payload) is code
