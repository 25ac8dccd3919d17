"""Corrupt and truncated checkpoints and journals are detected and recovered from as documented
(docs/reliability.md): fall back a generation, cut a torn tail, quarantine a plant whose history
is partial."""

import subprocess
import sys

from daemon_harness import Daemon, objective


def _run_session(d, steps):
    with d.client() as c:
        for _ in range(steps):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))


def _plant_dir(d):
    return d.state / "plants" / "alpha"


def _restored(d):
    return [e for e in d.events() if e["event"] == "plant_restored"][-1]


def _t(d):
    with d.client() as c:
        return c.status("alpha")["plants"][0]["t"]


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _crashed_session(tmp_path, steps=12):
    d = Daemon(tmp_path, checkpoint_every=5).start()
    _run_session(d, steps)
    d.kill()  # no final checkpoint: the journal holds the tail
    return d


def test_corrupt_checkpoint_falls_back_to_previous_generation_without_loss(tmp_path):
    d = _crashed_session(tmp_path)
    ck = _plant_dir(d) / "checkpoint"
    _flip(ck, len(ck.read_bytes()) // 2)
    d.start()
    info = _restored(d)
    assert info["source"] == "previous"
    assert any("checksum" in p for p in info["problems"])
    assert _t(d) == 13
    assert list(_plant_dir(d).glob("checkpoint.corrupt-*"))
    assert d.stop() == 0
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(_plant_dir(d))],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_truncated_checkpoint_falls_back_to_previous_generation(tmp_path):
    d = _crashed_session(tmp_path)
    ck = _plant_dir(d) / "checkpoint"
    ck.write_bytes(ck.read_bytes()[:20])
    d.start()
    assert _restored(d)["source"] == "previous"
    assert _t(d) == 13
    assert d.stop() == 0


def test_torn_journal_tail_is_cut_and_reported(tmp_path):
    d = _crashed_session(tmp_path)
    journal = _plant_dir(d) / "journal"
    with open(journal, "ab") as f:
        f.write(b"\x00\x00\x01\x00\xde\xad")  # a record header whose payload never made it
    d.start()
    info = _restored(d)
    assert info["source"] == "current"
    assert any("torn" in p or "truncat" in p for p in info["problems"]), info["problems"]
    assert _t(d) == 13
    _run_session(d, 2)
    assert d.stop() == 0


def test_corrupt_journal_record_stops_replay_there_and_saves_the_tail(tmp_path):
    d = _crashed_session(tmp_path, steps=13)
    journal = _plant_dir(d) / "journal"
    size = journal.stat().st_size
    _flip(journal, size - 40)  # inside the last record: every earlier record survives
    d.start()
    info = _restored(d)
    assert any("corrupt" in p or "crc" in p for p in info["problems"]), info["problems"]
    assert d.stop() == 0


def _unavailable(d, plant="alpha"):
    """The error a request for a quarantined plant gets."""
    from plant_adapters.client import DaemonError

    with d.client(plant, retries=0) as c:
        try:
            c.ask()
        except DaemonError as exc:
            return exc
    raise AssertionError(f"plant {plant} answered an ask")


def test_both_checkpoints_corrupt_quarantines_the_plant_instead_of_a_partial_history(tmp_path):
    d = _crashed_session(tmp_path, steps=14)
    for name in ("checkpoint", "checkpoint.prev"):
        _flip(_plant_dir(d) / name, 60)
    d.start()  # the daemon starts: one plant's state must not stop the others
    err = _unavailable(d)
    assert err.code == "plant_unavailable"
    assert "missing" in str(err) and "inspect" in str(err) and "repair" in str(err)
    assert d.stop() == 0
    assert list(_plant_dir(d).glob("checkpoint.corrupt-*"))  # kept, set aside, not deleted


def test_state_written_by_another_schema_is_refused_not_treated_as_corrupt(tmp_path):
    from tvbod.service.store import _CK_HEADER

    d = _crashed_session(tmp_path)
    ck = _plant_dir(d) / "checkpoint"
    data = bytearray(ck.read_bytes())
    magic, _, length, digest = _CK_HEADER.unpack_from(data)
    _CK_HEADER.pack_into(data, 0, magic, 2, length, digest)
    ck.write_bytes(bytes(data))
    d.start()
    err = _unavailable(d)
    assert err.code == "plant_unavailable"
    assert "file schema 2" in str(err) and "another tvbod version" in str(err)
    assert d.stop() == 0
    assert ck.exists() and not list(_plant_dir(d).glob("checkpoint.corrupt-*"))  # nothing moved
