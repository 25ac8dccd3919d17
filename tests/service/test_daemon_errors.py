"""Every error code, provoked against the running daemon: a clear error reply, the daemon stays
up, and no plant's state changes."""

import msgpack
import pytest
from daemon_harness import Daemon, RawPeer

from plant_adapters.client import DaemonError


def _snapshot(daemon):
    with daemon.client() as c:
        plants = c.status()["plants"]
    return [{k: p[k] for k in ("plant", "t", "dataset_size", "resets", "tells", "pending")}
            for p in plants]


def _ok(**kw):
    return {"v": 1, "id": "e1", **kw}


CASES = [
    ("not_msgpack", [b"\xc1\xc1\xc1"]),
    ("not_msgpack", [b"\x92\x01"]),  # truncated array
    ("not_a_map", [msgpack.packb([1, 2, 3])]),
    ("unknown_type", [msgpack.packb(_ok(type="explode"))]),
    ("bad_field", [msgpack.packb(_ok(type="ask"))]),  # plant missing
    ("bad_field", [msgpack.packb(_ok(type="ask", plant=7))]),
    ("bad_field", [msgpack.packb(_ok(type="tell", plant="alpha", proposal_id="x", measurement="1"))]),
    ("bad_field", [msgpack.packb({"v": 1, "id": "", "type": "ping"})]),
    ("version_mismatch", [msgpack.packb({"v": 2, "id": "e1", "type": "ping"})]),
    ("unknown_plant", [msgpack.packb(_ok(type="ask", plant="gamma"))]),
    ("unknown_proposal", [msgpack.packb(_ok(type="tell", plant="alpha", proposal_id="alpha:99",
                                            measurement=1.0))]),
    ("non_finite", [msgpack.packb(_ok(type="tell", plant="alpha", proposal_id="x",
                                      measurement=float("nan")))]),
    ("non_finite", [msgpack.packb(_ok(type="tell", plant="alpha", proposal_id="x",
                                      measurement=float("-inf")))]),
    ("too_large", [msgpack.packb(_ok(type="ping", pad="x" * 70_000))]),
    ("malformed_frame", [b"x", b"y", b"z"]),
    ("malformed_frame", [b"nonempty-delimiter", b"payload"]),
]


@pytest.mark.parametrize("code, frames", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_bad_message_gets_its_error_code_and_changes_nothing(daemon, raw, code, frames):
    before = _snapshot(daemon)
    reply = raw.send_frames(frames)
    assert reply is not None, "every addressable bad message gets a reply"
    assert reply["ok"] is False and reply["error"]["code"] == code, reply
    assert reply["error"]["message"]
    assert _snapshot(daemon) == before
    assert raw.send({"v": 1, "id": "after", "type": "ping"})["pong"] is True


def test_request_id_is_echoed_in_error_replies(raw):
    reply = raw.send(_ok(type="ask", plant="gamma", id="my-id-42"))
    assert reply["id"] == "my-id-42" and reply["error"]["code"] == "unknown_plant"


def test_duplicate_tell_is_refused_and_applied_once(daemon):
    with daemon.client() as c:
        p = c.ask()
        c.tell(p["proposal_id"], 1.0)
        before = _snapshot(daemon)
        with pytest.raises(DaemonError) as err:
            c.tell(p["proposal_id"], 2.0)
    assert err.value.code == "duplicate_tell"
    assert _snapshot(daemon) == before


def test_full_disk_refuses_tells_and_recovers_when_space_returns(tmp_path):
    fault = tmp_path / "fault"
    d = Daemon(tmp_path / "d", env={"TVBOD_FAULT_FILE": str(fault)}).start()
    with d.client() as c:
        p = c.ask()
        fault.write_text("enospc")
        before = _snapshot(d)
        with pytest.raises(DaemonError) as err:
            c.tell(p["proposal_id"], 1.0)
        assert err.value.code == "storage_unavailable"
        assert "No space left" in err.value.message
        assert _snapshot(d) == before
        fault.write_text("")
        r = c.tell(p["proposal_id"], 1.0)
        assert r["t"] == 1 and r["dataset_size"] == 1
    assert d.stop() == 0
    errors = [e for e in d.events() if e["event"] == "storage_error"]
    assert errors and "No space left" in errors[0]["error"]


def test_internal_error_is_answered_and_the_daemon_stays_up(tmp_path):
    fault = tmp_path / "fault"
    d = Daemon(tmp_path / "d", env={"TVBOD_FAULT_FILE": str(fault)}).start()
    peer = RawPeer(d.endpoint)
    fault.write_text("internal")
    reply = peer.send({"v": 1, "id": "i", "type": "ping"})
    assert reply["error"]["code"] == "internal" and reply["id"] == "i"
    fault.write_text("")
    assert peer.send({"v": 1, "id": "j", "type": "ping"})["pong"] is True
    peer.close()
    assert d.stop() == 0
