"""Optional Prometheus metrics (the `metrics` extra: `pip install 'tvbod[metrics]'`).

Off unless the daemon file has a `metrics:` section; then `prometheus_client` serves them over
HTTP on `metrics.address` (default 127.0.0.1) and `metrics.port`. The server calls `message`,
`client_error`, `request` and `fsync`; plant events (`reset`, `proposal_abandoned`, `measurement`,
`plant_restored`) reach `observe` through the event logs, so counting rides on the events that
already exist. `Metrics` itself is the do-nothing version used when metrics are off.
"""

from __future__ import annotations

from typing import Any

#: Latency buckets in seconds (0.5 ms .. 10 s): a tell includes its journal fsync.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Metrics:
    """No metrics: every call does nothing."""

    def message(self, kind: str) -> None:
        """One request of `kind` (`ask`, `tell`, ..., `invalid` when it did not decode)."""

    def client_error(self, code: str) -> None:
        """One error reply with protocol error `code`."""

    def request(self, kind: str, seconds: float) -> None:
        """Service time of one `ask` or `tell`."""

    def fsync(self, seconds: float) -> None:
        """Duration of one group commit (every touched journal fsync'd)."""

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """A plant event as it is emitted."""

    def quarantined(self, plant: str, on: bool) -> None:
        """Plant `plant` was set aside (`on`) or is served again."""

    def close(self) -> None:
        """Stop serving."""


class PrometheusMetrics(Metrics):
    """Counters, histograms and gauges in a private registry, served on `address:port`."""

    def __init__(self, address: str, port: int) -> None:
        import prometheus_client as pc

        self.registry = reg = pc.CollectorRegistry()
        self.messages = pc.Counter("tvbod_messages", "Requests received, by type", ["type"],
                                   registry=reg)
        self.errors = pc.Counter("tvbod_client_errors", "Error replies, by protocol error code",
                                 ["code"], registry=reg)
        self.resets = pc.Counter("tvbod_resets", "Trigger resets, by plant", ["plant"], registry=reg)
        self.abandoned = pc.Counter("tvbod_proposals_abandoned",
                                    "Proposals abandoned after proposal_timeout, by plant",
                                    ["plant"], registry=reg)
        self.latency = pc.Histogram("tvbod_request_seconds", "Service time of ask and tell",
                                    ["type"], buckets=_BUCKETS, registry=reg)
        self.fsyncs = pc.Histogram("tvbod_fsync_seconds", "Group commit: fsync of the journals of "
                                   "one batch of requests", buckets=_BUCKETS, registry=reg)
        self.violations = pc.Counter("tvbod_safety_violations", "Measurements beyond the "
                                     "safety threshold and failed experiments of plants with "
                                     "safety:, by plant", ["plant"], registry=reg)
        self.safe_fraction = pc.Gauge("tvbod_plant_safe_fraction", "Share of the gain box "
                                      "certified safe (plants with safety:)", ["plant"],
                                      registry=reg)
        self.t = pc.Gauge("tvbod_plant_t", "The plant's step t", ["plant"], registry=reg)
        self.dataset = pc.Gauge("tvbod_plant_dataset_size", "Points in the plant's GP dataset",
                                ["plant"], registry=reg)
        self.quarantine = pc.Gauge("tvbod_plant_quarantined", "1 while the plant is quarantined "
                                   "(its state could not be restored), else 0", ["plant"],
                                   registry=reg)
        self._server, self._thread = pc.start_http_server(port, addr=address, registry=reg)

    def message(self, kind: str) -> None:
        self.messages.labels(kind).inc()

    def client_error(self, code: str) -> None:
        self.errors.labels(code).inc()

    def request(self, kind: str, seconds: float) -> None:
        self.latency.labels(kind).observe(seconds)

    def fsync(self, seconds: float) -> None:
        self.fsyncs.observe(seconds)

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        plant = fields.get("plant")
        if plant is None or fields.get("replayed"):
            return
        if event == "reset":
            self.resets.labels(plant).inc()
        elif event == "proposal_abandoned":
            self.abandoned.labels(plant).inc()
        elif event == "safety_violation":
            self.violations.labels(plant).inc()
        elif event in ("measurement", "plant_restored"):
            self.t.labels(plant).set(fields["t"] + (event == "measurement"))
            self.dataset.labels(plant).set(fields["dataset_size"])
            if fields.get("safe_fraction") is not None:
                self.safe_fraction.labels(plant).set(fields["safe_fraction"])

    def quarantined(self, plant: str, on: bool) -> None:
        self.quarantine.labels(plant).set(1.0 if on else 0.0)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def create(endpoint: tuple[str, int] | None) -> Metrics:
    """The daemon's metrics: served on `endpoint`, or none at all (raises OSError if the port is
    taken)."""
    return Metrics() if endpoint is None else PrometheusMetrics(*endpoint)
