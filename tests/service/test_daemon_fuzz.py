"""10,000+ random and mutated frames against a running daemon: no crash, no state change."""

import msgpack
import pytest
from daemon_harness import Daemon, RawPeer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VALID = [
    {"v": 1, "id": "f", "type": "ping"},
    {"v": 1, "id": "f", "type": "status"},
    {"v": 1, "id": "f", "type": "hello", "plant": "alpha"},
    {"v": 1, "id": "f", "type": "tell", "plant": "alpha", "proposal_id": "never-issued", "measurement": 1.0},
]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                    st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                      max_leaves=10)


@st.composite
def frames(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return [draw(st.binary(min_size=1, max_size=200))]
    if kind == 1:
        msg = dict(draw(st.sampled_from(VALID)))
        for key in draw(st.lists(st.sampled_from(["v", "id", "type", "plant", "proposal_id",
                                                  "measurement", "failed", "metadata", "x"]), max_size=3)):
            msg[key] = draw(values)
        try:
            return [msgpack.packb(msg, use_bin_type=True)]
        except (OverflowError, ValueError, TypeError):
            return [b"\x80"]
    if kind == 2:
        blob = bytearray(msgpack.packb(draw(st.sampled_from(VALID))))
        for _ in range(draw(st.integers(1, 4))):
            blob[draw(st.integers(0, len(blob) - 1))] = draw(st.integers(0, 255))
        return [bytes(blob)]
    return draw(st.lists(st.binary(max_size=30), min_size=2, max_size=4))


@pytest.fixture
def daemon(tmp_path):
    """As conftest's, but the pending proposal outlives the fuzzing: on a loaded machine 10,000
    frames take longer than the default 60 s proposal timeout, and an abandonment by the clock
    is not a state change made by the fuzz."""
    d = Daemon(tmp_path / "d", {"alpha": {"timeout": 3600}, "beta": {"sense": "maximize", "seed": 2}})
    d.start()
    yield d
    assert d.stop() == 0, d.log.read_text()[-3000:]


def test_fuzzed_frames_never_crash_the_daemon_or_touch_state(daemon):
    with daemon.client() as c:
        p = c.ask()
        before = c.status()["plants"]
    peer = RawPeer(daemon.endpoint)
    sent = {"n": 0, "unanswered": 0}

    @settings(max_examples=10_000, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(frames())
    def fuzz(fr):
        sent["n"] += 1
        reply = peer.send_frames(fr, timeout=5.0)
        if reply is None:
            sent["unanswered"] += 1
            return
        # Only a well-formed ping/status/hello may succeed; nothing may change a plant.
        assert reply["ok"] is False or reply["type"] in ("ping", "status", "hello")

    fuzz()
    peer.close()
    assert sent["n"] >= 10_000
    assert sent["unanswered"] == 0
    with daemon.client() as c:
        after = c.status()["plants"]
        assert c.ask()["proposal_id"] == p["proposal_id"]
    keys = ("plant", "t", "dataset_size", "resets", "tells", "pending")
    assert [{k: q[k] for k in keys} for q in after] == [{k: q[k] for k in keys} for q in before]
