"""Typed replies encode to exactly the bytes the daemon sent before they existed.

The hex strings were produced by tvbod 0.2.0's `encode(ok_reply(id, type, **fields))` with the
plant's field order of that version (and `error_reply` for the error); the typed replies must
reproduce them byte for byte, and `parse_reply` must read them back into the same objects."""

import pytest

from tvbod.protocol import (
    AskReply, BestReply, ErrorCode, HelloReply, ObserveReply, PingReply, ProtocolError,
    StatusReply, TellReply, decode_reply, encode, parse_reply,
)

_RULE = "posterior-mean maximizer over D"
_PENDING = {"proposal_id": "cart:3", "gains": {"k": 0.5}, "t": 3}
CASES = {
    "hello": (HelloReply("r1", plant="cart", parameters=[{"name": "k", "lower": 0.0, "upper": 1.0,
                                                         "unit": None}],
                         sense="minimize", t=3, pending=_PENDING),
              "89a17601a26964a27231a26f6bc3a474797065a568656c6c6fa5706c616e74a463617274aa706172616d65746572739184a46e616d65a16ba56c6f776572cb0000000000000000a57570706572cb3ff0000000000000a4756e6974c0a573656e7365a86d696e696d697a65a17403a770656e64696e6783ab70726f706f73616c5f6964a6636172743a33a56761696e7381a16bcb3fe0000000000000a17403"),
    "ask": (AskReply(7, proposal_id="cart:3", gains={"k": 0.5}, t=3),
            "87a17601a2696407a26f6bc3a474797065a361736bab70726f706f73616c5f6964a6636172743a33a56761696e7381a16bcb3fe0000000000000a17403"),
    "tell": (TellReply("r3", t=3, reset=True, psi=1.25, threshold=0.5, dataset_size=1,
                       measurement=2.0, failed=False),
             "8ca17601a26964a27233a26f6bc3a474797065a474656c6ca17403a57265736574c3a3707369cb3ff4000000000000a97468726573686f6c64cb3fe0000000000000ac646174617365745f73697a6501ab6d6561737572656d656e74cb4000000000000000a66661696c6564c2a96475706c6963617465c2"),
    "tell-duplicate": (TellReply("r3", t=3, reset=False, psi=0.25, threshold=0.5, dataset_size=3,
                                 measurement=2.0, failed=True, duplicate=True),
                       "8ca17601a26964a27233a26f6bc3a474797065a474656c6ca17403a57265736574c2a3707369cb3fd0000000000000a97468726573686f6c64cb3fe0000000000000ac646174617365745f73697a6503ab6d6561737572656d656e74cb4000000000000000a66661696c6564c3a96475706c6963617465c3"),
    "observe": (ObserveReply("r4", t=4, reset=False, psi=0.1, threshold=0.5, dataset_size=4,
                             measurement=-1.0, failed=False),
                "8ca17601a26964a27234a26f6bc3a474797065a76f627365727665a17404a57265736574c2a3707369cb3fb999999999999aa97468726573686f6c64cb3fe0000000000000ac646174617365745f73697a6504ab6d6561737572656d656e74cbbff0000000000000a66661696c6564c2a96475706c6963617465c2"),
    "best": (BestReply("r5", plant="cart", t=4, dataset_size=4, sense="minimize", rule=_RULE,
                       gains={"k": 0.25}, mean=1.5, std=0.125, measured_at=2),
             "8da17601a26964a27235a26f6bc3a474797065a462657374a5706c616e74a463617274a17404ac646174617365745f73697a6504a573656e7365a86d696e696d697a65a472756c65bf706f73746572696f722d6d65616e206d6178696d697a6572206f7665722044a56761696e7381a16bcb3fd0000000000000a46d65616ecb3ff8000000000000a3737464cb3fc0000000000000ab6d656173757265645f617402"),
    "best-empty": (BestReply("r6", plant="cart", t=1, dataset_size=0, sense="minimize", rule=_RULE),
                   "8da17601a26964a27236a26f6bc3a474797065a462657374a5706c616e74a463617274a17401ac646174617365745f73697a6500a573656e7365a86d696e696d697a65a472756c65bf706f73746572696f722d6d65616e206d6178696d697a6572206f7665722044a56761696e73c0a46d65616ec0a3737464c0ab6d656173757265645f6174c0"),
    "status": (StatusReply("r7", plants=[{"plant": "cart", "t": 1}],
                           daemon={"version": "0.2.0", "pid": 12, "uptime_s": 1.5, "messages": 9}),
               "86a17601a26964a27237a26f6bc3a474797065a6737461747573a6706c616e74739182a5706c616e74a463617274a17401a66461656d6f6e84a776657273696f6ea5302e322e30a37069640ca8757074696d655f73cb3ff8000000000000a86d6573736167657309"),
    "ping": (PingReply("r8", pong=True, time=1700000000.25),
             "86a17601a26964a27238a26f6bc3a474797065a470696e67a4706f6e67c3a474696d65cb41d954fc40100000"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_typed_reply_encodes_to_the_bytes_of_0_2_0(name):
    reply, hex_bytes = CASES[name]
    assert encode(reply.to_message()).hex() == hex_bytes


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_decoded_reply_parses_back_into_the_same_typed_reply(name):
    reply, hex_bytes = CASES[name]
    assert parse_reply(decode_reply(bytes.fromhex(hex_bytes))) == reply


def test_the_error_reply_encodes_to_the_bytes_of_0_2_0():
    exc = ProtocolError(ErrorCode.STORAGE_UNAVAILABLE,
                        "the daemon cannot persist to its state directory: x", "r9")
    assert encode(exc.to_reply()).hex() == (
        "85a17601a26964a27239a26f6bc2a474797065a56572726f72a56572726f7282a4636f6465b373746f726167"
        "655f756e617661696c61626c65a76d657373616765d933746865206461656d6f6e2063616e6e6f742070657273"
        "69737420746f20697473207374617465206469726563746f72793a2078")

