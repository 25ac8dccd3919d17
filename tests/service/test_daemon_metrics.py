"""The optional Prometheus endpoint, read over real HTTP, and `tvbod status --watch`."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from daemon_harness import Daemon, RawPeer, objective
from probes import wait_for

pytest.importorskip("prometheus_client")  # `make test` installs the metrics extra


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port, path):
    """(status, content type, body) of one GET, 4xx/5xx included."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _scrape(port):
    status, ctype, text = _get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version="), (status, ctype)
    values = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def _types(port):
    """metric family -> its `# TYPE`."""
    text = _get(port, "/metrics")[2]
    return dict(re.findall(r"^# TYPE (\w+) (\w+)$", text, re.M))


#: The families the daemon exports, with their types.
FAMILIES = {
    "tvbod_requests_total": "counter", "tvbod_client_errors_total": "counter",
    "tvbod_resets_total": "counter", "tvbod_proposals_abandoned_total": "counter",
    "tvbod_safety_violations_total": "counter",
    "tvbod_request_duration_seconds": "histogram", "tvbod_fsync_duration_seconds": "histogram",
    "tvbod_plant_step": "gauge", "tvbod_plant_dataset_points": "gauge",
    "tvbod_plant_quarantined": "gauge", "tvbod_plant_safe_fraction": "gauge",
    "tvbod_build_info": "gauge",
}


def test_a_fresh_daemon_exports_every_series_at_zero_with_conventional_names(tmp_path):
    from tvbod import __version__
    from tvbod.core.behaviours import NEWEST
    from tvbod.protocol import REQUEST_TYPES, ErrorCode

    port = _free_port()
    d = Daemon(tmp_path, {"alpha": {}, "beta": {}}, extra=f"metrics: {{port: {port}}}\n").start()
    try:
        types = _types(port)
        m = _scrape(port)
        health = _get(port, "/healthz")
        other = [_get(port, path)[0] for path in ("/", "/metric", "/healthz/x", "/favicon.ico")]
    finally:
        assert d.stop() == 0
    assert types == FAMILIES
    assert not [k for k in m if "_created" in k]
    for plant in ("alpha", "beta"):
        assert m[f'tvbod_resets_total{{plant="{plant}"}}'] == 0
        assert m[f'tvbod_proposals_abandoned_total{{plant="{plant}"}}'] == 0
        assert m[f'tvbod_plant_quarantined{{plant="{plant}"}}'] == 0
        assert m[f'tvbod_plant_step{{plant="{plant}"}}'] == 1
        assert m[f'tvbod_plant_dataset_points{{plant="{plant}"}}'] == 0
        assert f'tvbod_safety_violations_total{{plant="{plant}"}}' not in m  # no safety:
    for kind in (*REQUEST_TYPES, "invalid"):  # the harness pings until the daemon answers
        count = m[f'tvbod_requests_total{{type="{kind}"}}']
        assert count >= 1 if kind == "ping" else count == 0, kind
    assert {"best", "observe"} <= set(REQUEST_TYPES)
    for code in ErrorCode:
        assert m[f'tvbod_client_errors_total{{code="{code}"}}'] == 0, code
    assert m['tvbod_request_duration_seconds_count{type="observe"}'] == 0
    python = ".".join(map(str, sys.version_info[:3]))
    assert m[f'tvbod_build_info{{behaviour="{NEWEST}",python="{python}",'
             f'version="{__version__}"}}'] == 1
    assert health[0] == 200 and health[1] == "application/json"
    assert json.loads(health[2]) == {"status": "ok", "plants": 2, "quarantined": []}
    assert other == [404, 404, 404, 404]


def test_promtool_finds_no_naming_problem_in_a_live_scrape(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (apt-get install prometheus): the lint needs it")
    d, port = _safe_daemon(tmp_path)
    try:
        with d.client() as c:
            p = c.ask()
            c.tell(p["proposal_id"], 0.05)
        text = _get(port, "/metrics")[2]
    finally:
        d.stop()
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr


def test_prometheus_endpoint_counts_requests_errors_resets_abandons_and_latencies(tmp_path):
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
    assert m['tvbod_resets_total{plant="slow"}'] == 0
    assert m['tvbod_requests_total{type="ask"}'] == 21
    assert m['tvbod_requests_total{type="tell"}'] == 21
    assert m['tvbod_client_errors_total{code="unknown_proposal"}'] == 1
    assert m['tvbod_request_duration_seconds_count{type="tell"}'] == 21
    assert m['tvbod_request_duration_seconds_bucket{le="+Inf",type="ask"}'] == 21
    assert m["tvbod_fsync_duration_seconds_count"] >= 20
    assert m['tvbod_plant_step{plant="alpha"}'] == status["t"] == 21
    assert m['tvbod_plant_dataset_points{plant="alpha"}'] == status["dataset_size"]
    d.proc.send_signal(signal.SIGTERM)
    seen = wait_for(lambda: _health_or_gone(port), timeout=60.0, interval=0.02)
    assert d.proc.wait(60) == 0
    assert seen in ("stopping", "gone")
    with pytest.raises(OSError):  # the endpoint went away with the daemon
        _scrape(port)


def _health_or_gone(port):
    try:
        status, _, body = _get(port, "/healthz")
    except OSError:
        return "gone"
    return "stopping" if status == 503 and json.loads(body) == {"status": "stopping"} else None


def test_a_reloaded_plant_gets_zero_series_and_a_removed_one_loses_them(tmp_path):
    from daemon_harness import plant_yaml

    port = _free_port()
    d = Daemon(tmp_path, {"alpha": {}, "beta": {}}, extra=f"metrics: {{port: {port}}}\n").start()
    try:
        (tmp_path / "plants" / "beta.yaml").unlink()
        (tmp_path / "plants" / "gamma.yaml").write_text(plant_yaml("gamma"))
        d.proc.send_signal(signal.SIGHUP)
        m = wait_for(lambda: (v := _scrape(port)).get('tvbod_plant_step{plant="gamma"}') and v,
                     timeout=60.0, interval=0.1)
        assert m['tvbod_resets_total{plant="gamma"}'] == 0
        assert not [k for k in m if 'plant="beta"' in k]
        assert json.loads(_get(port, "/healthz")[2])["plants"] == 2
    finally:
        assert d.stop() == 0


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


def _safe_daemon(tmp_path):
    """A started daemon with metrics whose plant `alpha` has `safety:`, and its metrics port."""
    from daemon_harness import SAFE_PLANT

    port = _free_port()
    d = Daemon(tmp_path, extra=f"metrics: {{port: {port}}}\n")
    (tmp_path / "plants" / "alpha.yaml").write_text(SAFE_PLANT)
    return d.start(), port


def test_prometheus_counts_safety_violations_and_the_safe_fraction(tmp_path):
    d, port = _safe_daemon(tmp_path)
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


def test_docs_events_md_lists_every_metric_with_its_type():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    table = text.split("## Metrics", 1)[1]
    rows = dict(re.findall(r"^\| `(tvbod_\w+)` \| (\w+) \|", table, re.M))
    assert rows == FAMILIES
