"""The measurement guard (absurd values are refused, nothing applied, nothing on stderr) and a
resent tell whose reply left the request cache (it gets its original outcome)."""

import json

from daemon_harness import Daemon, RawPeer, objective


def _state(c):
    p = c.status("alpha")["plants"][0]
    return {k: p[k] for k in ("t", "dataset_size", "resets", "tells", "pending")}


ADAPTER = "measurement-test"


def _tell(peer, rid, pid, y):
    return peer.send({"v": 1, "id": rid, "type": "tell", "plant": "alpha", "proposal_id": pid,
                      "measurement": y, "adapter": ADAPTER})


def test_absurd_measurements_get_bad_field_and_change_nothing(tmp_path):
    d = Daemon(tmp_path)
    plant_file = d.root / "plants" / "alpha.yaml"
    plant_file.write_text(plant_file.read_text() + "max_measurement_sigmas: 100\n")
    d.start()
    peer = RawPeer(d.endpoint)
    with d.client(adapter=ADAPTER) as c:
        p = c.ask()
        before = _state(c)
        for i, y in enumerate([1e308, -1e308, 150.0, -100.5]):
            reply = _tell(peer, f"big{i}", p["proposal_id"], y)
            assert reply["ok"] is False and reply["error"]["code"] == "bad_field", reply
            rule = "max_measurement_abs" if abs(y) > 1e12 else "max_measurement_sigmas"
            assert rule in reply["error"]["message"], reply
        assert _state(c) == before
        ok = _tell(peer, "fine", p["proposal_id"], 99.0)  # within 100 prior sds: applied
        assert ok["ok"] and ok["t"] == 1
    peer.close()
    assert d.stop() == 0
    text = d.log.read_text()  # stdout and stderr of the daemon
    assert "RuntimeWarning" not in text and "Traceback" not in text
    for line in text.splitlines():
        json.loads(line)  # every line is a structured event, nothing free-form on stderr


def test_a_resent_tell_that_left_the_reply_cache_gets_its_original_outcome(tmp_path):
    d = Daemon(tmp_path).start()
    peer = RawPeer(d.endpoint)
    with d.client(adapter=ADAPTER) as c:
        p = c.ask()
        first = _tell(peer, "the-tell", p["proposal_id"], objective(p["gains"], p["t"]))
        assert first["ok"] and first["duplicate"] is False
        for _ in range(40):  # 80 more requests: the 64-entry cache forgets "the-tell"
            q = c.ask()
            c.tell(q["proposal_id"], objective(q["gains"], q["t"]))
        after = _state(c)
    again = _tell(peer, "the-tell", p["proposal_id"], first["measurement"])
    assert again["ok"] and again["duplicate"] is True
    assert {k: again[k] for k in ("t", "reset", "psi", "dataset_size", "measurement")} == \
        {k: first[k] for k in ("t", "reset", "psi", "dataset_size", "measurement")}
    other = _tell(peer, "another", p["proposal_id"], first["measurement"] + 1.0)
    assert other["error"]["code"] == "duplicate_tell"  # a different tell of a told proposal
    d.kill()  # the outcome is in the journal and checkpoints: it survives a crash
    d.start()
    peer.close()
    peer = RawPeer(d.endpoint)
    assert _tell(peer, "the-tell", p["proposal_id"], first["measurement"])["t"] == first["t"]
    with d.client(adapter=ADAPTER) as c:
        assert _state(c) == after
    peer.close()
    assert d.stop() == 0


def test_a_tell_for_a_step_older_than_the_remembered_outcomes_is_stale_not_unknown(tmp_path):
    from daemon_harness import arms_plant_yaml

    matrix = [[1.0 if i == j else 0.3 for j in range(4)] for i in range(4)]
    d = Daemon(tmp_path, plants={}, checkpoint_every=100)
    (tmp_path / "plants" / "arms.yaml").write_text(arms_plant_yaml("arms", matrix))
    d.start()
    peer = RawPeer(d.endpoint)
    with d.client("arms", adapter=ADAPTER) as c:
        first = c.ask()
        told = c.tell(first["proposal_id"], 1.0)
        for _ in range(300):  # past the last 256 outcomes the plant remembers
            p = c.ask()
            c.tell(p["proposal_id"], float(p["gains"]["arm"]))
    again = peer.send({"v": 1, "id": "late", "type": "tell", "plant": "arms",
                       "proposal_id": first["proposal_id"], "measurement": 1.0, "adapter": ADAPTER})
    never = peer.send({"v": 1, "id": "never", "type": "tell", "plant": "arms",
                       "proposal_id": "arms:999999", "measurement": 1.0, "adapter": ADAPTER})
    peer.close()
    assert told["t"] == 1
    assert again["error"]["code"] == "stale_proposal", again
    assert "step 1" in again["error"]["message"] and "256" in again["error"]["message"]
    assert never["error"]["code"] == "unknown_proposal", never
    assert d.stop() == 0
