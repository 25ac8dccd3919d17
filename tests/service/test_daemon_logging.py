"""Under systemd every stdout line carries its syslog priority, so `journalctl -p` filters;
`log_level` decides what reaches the journal while events.jsonl keeps everything."""

import json
import os
import re

from daemon_harness import Daemon, RawPeer, objective

from tvbod.service.events import PRIORITIES

_PREFIXED = re.compile(r"^<(\d)>(\{.*\})$")


def _journal_daemon(root, extra=""):
    """A daemon whose stdout is the file `$JOURNAL_STREAM` names, as systemd connects it."""
    root.mkdir(parents=True)
    log = root / "daemon.log"
    log.touch()
    st = os.stat(log)
    return Daemon(root, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, extra=extra)


def _session_with_a_warning(d):
    with d.client() as c:
        for _ in range(3):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    peer = RawPeer(d.endpoint)  # a client mistake: a warning
    reply = peer.send({"v": 1, "id": "x", "type": "tell", "plant": "alpha",
                       "proposal_id": "alpha:999", "measurement": 1.0, "adapter": "tvbod-client"})
    peer.close()
    assert reply["error"]["code"] == "unknown_proposal"


def _prefixed_lines(d):
    out = []
    for line in d.log.read_text().splitlines():
        m = _PREFIXED.match(line)
        assert m, f"line without a priority prefix: {line!r}"
        out.append((int(m.group(1)), json.loads(m.group(2))))
    return out


def test_under_journald_each_line_starts_with_the_priority_of_its_level(tmp_path):
    d = _journal_daemon(tmp_path / "d").start()
    _session_with_a_warning(d)
    assert d.stop() == 0
    lines = _prefixed_lines(d)
    assert all(prio == PRIORITIES[e["level"]] for prio, e in lines)
    by_prio = {prio: {e["event"] for p, e in lines if p == prio} for prio, _ in lines}
    assert "client_error" in by_prio[4] and "daemon_started" in by_prio[6]
    assert 7 not in by_prio  # log_level info: no per-step debug lines in the journal
    kept = {e["event"] for e in d.events()}
    assert {"proposal", "measurement"} <= kept  # the plant's history keeps every event


def test_log_level_debug_shows_per_step_events_and_warning_hides_info(tmp_path):
    d = _journal_daemon(tmp_path / "debug", extra="log_level: debug\n").start()
    _session_with_a_warning(d)
    assert d.stop() == 0
    assert {"proposal", "measurement"} <= {e["event"] for p, e in _prefixed_lines(d) if p == 7}

    d = _journal_daemon(tmp_path / "warning", extra="log_level: warning\n").start()
    _session_with_a_warning(d)
    assert d.stop() == 0
    assert {p for p, _ in _prefixed_lines(d)} == {4}


def test_without_the_journal_stream_lines_are_plain_json(tmp_path):
    d = Daemon(tmp_path, env={"JOURNAL_STREAM": "1:2"}).start()  # some other stream
    _session_with_a_warning(d)
    assert d.stop() == 0
    lines = d.log.read_text().splitlines()
    assert lines and all(line.startswith("{") for line in lines)
