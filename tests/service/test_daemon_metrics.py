"""The optional Prometheus endpoint, read over real HTTP, and `tvbod status --watch`."""

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from daemon_harness import Daemon, RawPeer, objective
from probes import wait_for

pytest.importorskip("prometheus_client")  # `make test` installs the metrics extra


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values




def test_prometheus_endpoint_counts_messages_errors_resets_abandons_and_latencies(tmp_path):
    port = _free_port()
    d = Daemon(tmp_path, {"alpha": {}, "slow": {"timeout": 1}},
               extra=f"metrics: {{port: {port}}}\n").start()
    with d.client() as c:
        for _ in range(20):  # the objective jumps at t = 15: the trigger resets
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
        status = c.status("alpha")["plants"][0]
    peer = RawPeer(d.endpoint)
    bad = peer.send({"v": 1, "id": "e1", "type": "tell", "plant": "alpha",
                     "proposal_id": "alpha:999", "measurement": 1.0,
                     "adapter": "tvbod-client"})
    assert bad["error"]["code"] == "unknown_proposal"
    assert peer.send({"v": 1, "id": "e2", "type": "ask", "plant": "slow"})["ok"]
    peer.close()
    m = wait_for(lambda: (v := _scrape(port)).get('tvbod_proposals_abandoned_total{plant="slow"}')
                 and v, timeout=60.0, interval=0.1)  # the slow plant's proposal times out after 1 s
    resets = sum(1 for e in d.events() if e["event"] == "reset")
    assert resets >= 1 and m['tvbod_resets_total{plant="alpha"}'] == resets
    assert m['tvbod_messages_total{type="ask"}'] == 21
    assert m['tvbod_messages_total{type="tell"}'] == 21
    assert m['tvbod_client_errors_total{code="unknown_proposal"}'] == 1
    assert m['tvbod_request_seconds_count{type="tell"}'] == 21
    assert m['tvbod_request_seconds_bucket{le="+Inf",type="ask"}'] == 21
    assert m["tvbod_fsync_seconds_count"] >= 20
    assert m['tvbod_plant_t{plant="alpha"}'] == status["t"] == 21
    assert m['tvbod_plant_dataset_size{plant="alpha"}'] == status["dataset_size"]
    assert d.stop() == 0
    with pytest.raises(OSError):  # the endpoint went away with the daemon
        _scrape(port)


def test_metrics_are_off_unless_configured(tmp_path):
    d = Daemon(tmp_path).start()
    started = next(e for e in d.log_events() if e["event"] == "daemon_started")
    assert not any(e.startswith("http") for e in started["endpoints"])
    assert d.stop() == 0


def test_status_watch_redraws_the_table_until_interrupted(tmp_path):
    d = Daemon(tmp_path).start()
    # SIGINT as a terminal gives it: a suite started in the background (`make test &`) inherits
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler (the hang once seen:
    # the child printing on until its pipe filled). PYTHONFAULTHANDLER: a hang's stack on SIGABRT.
    proc = subprocess.Popen([sys.executable, "-m", "tvbod", "status", "--endpoint", d.endpoint,
                             "--watch", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONFAULTHANDLER="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    frames = 0
    seen_table = False
    for line in proc.stdout:
        frames += line.startswith("every 0.2 s")
        seen_table |= line.startswith("alpha ")
        if frames == 3:
            break
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"status --watch still running 60 s after SIGINT:\n{err}") from None
    assert rc == 0, proc.stderr.read()
    assert seen_table
    assert d.stop() == 0


def test_prometheus_counts_safety_violations_and_the_safe_fraction(tmp_path):
    from daemon_harness import SAFE_PLANT

    port = _free_port()
    d = Daemon(tmp_path, extra=f"metrics: {{port: {port}}}\n")
    (tmp_path / "plants" / "alpha.yaml").write_text(SAFE_PLANT)
    d.start()
    try:
        with d.client() as c:
            for value in (0.05, 0.06, 5.0, None):  # two good, one beyond max_cost, one failure
                p = c.ask()
                c.tell(p["proposal_id"], value, failed=value is None)
        m = wait_for(lambda: (v := _scrape(port)).get(
            'tvbod_safety_violations_total{plant="alpha"}') == 2 and v, timeout=30.0,
            interval=0.1)
    finally:
        d.stop()
    assert 0.0 <= m['tvbod_plant_safe_fraction{plant="alpha"}'] <= 1.0
