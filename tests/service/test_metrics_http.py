"""The metrics endpoint's HTTP surface on a real socket: /metrics, /healthz (200 while serving,
503 once stopping), HEAD, 404 elsewhere, and the port freed on close."""

import json
import socket
import urllib.error
import urllib.request

import pytest

pc = pytest.importorskip("prometheus_client")  # `make test` installs the metrics extra

from tvbod.service.metrics_http import MetricsServer  # noqa: E402


def _request(port, path, method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_health_turns_503_when_stopping_and_head_answers_without_a_body():
    reg = pc.CollectorRegistry()
    pc.Counter("tvbod_demo", "a counter", registry=reg).inc(3)
    server = MetricsServer("127.0.0.1", 0, reg, lambda: {"status": "ok", "plants": 1,
                                                         "quarantined": ["q"]})
    port = server._server.server_address[1]
    try:
        status, _, body = _request(port, "/metrics")
        assert status == 200 and b"tvbod_demo_total 3.0" in body
        status, headers, body = _request(port, "/metrics", "HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        assert json.loads(_request(port, "/healthz")[2])["quarantined"] == ["q"]
        assert _request(port, "/healthz?verbose=1")[0] == 200
        assert _request(port, "/nothing")[0] == 404
        server.stopping = True
        status, _, body = _request(port, "/healthz")
        assert status == 503 and json.loads(body) == {"status": "stopping"}
        assert _request(port, "/metrics")[0] == 200  # a last scrape still works
    finally:
        server.close()
    with pytest.raises(ConnectionRefusedError):  # nobody listens there any more
        socket.create_connection(("127.0.0.1", port), timeout=10)


def test_a_taken_port_is_an_oserror():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            MetricsServer("127.0.0.1", s.getsockname()[1], pc.CollectorRegistry(), dict)
