"""The metrics endpoint: `/metrics` (Prometheus text), `/healthz` (JSON), 404 for every other path.

A threaded HTTP server on a daemon thread, so a slow scraper never holds the event loop.
`/healthz` answers 200 `{"status": "ok", "plants": N, "quarantined": [...]}` while the daemon
serves (a quarantined plant is reported, not a failure: the others are served) and 503
`{"status": "stopping"}` once shutdown began; a daemon that is down does not answer at all.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        if path == "/metrics":
            from prometheus_client.exposition import choose_encoder

            encoder, ctype = choose_encoder(self.headers.get("Accept", ""))  # as prometheus_client
            status, data = 200, encoder(owner.registry)
        elif path == "/healthz":
            health = {"status": "stopping"} if owner.stopping else owner.health()
            status = 503 if owner.stopping else 200
            ctype, data = "application/json", json.dumps(health).encode() + b"\n"
        else:
            status, ctype = 404, "text/plain; charset=utf-8"
            data = b"not found: tvbod serves /metrics and /healthz\n"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Scrapes are not logged: stdout carries the daemon's events only."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "MetricsServer"


class MetricsServer:
    """Serves `registry` and `health()` on `address:port` until `close` (raises OSError if the
    port is taken)."""

    def __init__(self, address: str, port: int, registry, health: Callable[[], dict]) -> None:
        self.registry = registry
        self.health = health
        self.stopping = False
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
        server = type("_BoundServer", (_Server,), {"address_family": family})
        self._server = server((address, port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="tvbod-metrics",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
