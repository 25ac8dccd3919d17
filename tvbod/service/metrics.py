"""Optional Prometheus metrics (the `metrics` extra: `pip install 'tvbod[metrics]'`).

Off unless the daemon file has a `metrics:` section; then `/metrics` is served over HTTP on
`metrics.address` (default 127.0.0.1) and `metrics.port`, `/healthz` answers health and every
other path 404 (tvbod/service/metrics_http.py). The server calls `message`, `client_error`,
`request` and `fsync`; plant events (`reset`, `proposal_abandoned`, `safety_violation`,
`measurement`) reach `observe` through the event logs, so counting rides on the events that
already exist; the plant host calls `plant_served`, `plant_removed` and `quarantined`.

Names follow Prometheus' conventions: counters end in `_total` and count one thing, durations
are `*_duration_seconds`, `tvbod_build_info` carries the version as labels. No `_created`
series. Every series of a plant starts at 0 (the gauges at the restored values) when the plant
is served, and every request type and error code at 0 when the daemon starts, so an
`increase(...)` alert sees the first event. `Metrics` itself is the do-nothing version used when
metrics are off.
"""

from __future__ import annotations

import platform
from typing import Any

#: Latency buckets in seconds (0.5 ms .. 10 s): a tell includes its journal fsync.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: The request types timed by `request` (the plant-changing ones, tvbod/service/requests.py).
TIMED = ("ask", "tell", "observe")


class Metrics:
    """No metrics: every call does nothing."""

    def message(self, kind: str) -> None:
        """One request of `kind` (`ask`, `tell`, ..., `invalid` when it did not decode)."""

    def client_error(self, code: str) -> None:
        """One error reply with protocol error `code`."""

    def request(self, kind: str, seconds: float) -> None:
        """Service time of one `ask`, `tell` or `observe`."""

    def fsync(self, seconds: float) -> None:
        """Duration of one group commit (every touched journal fsync'd)."""

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """A plant event as it is emitted."""

    def plant_served(self, plant: str, t: int, dataset_size: int, safety: bool) -> None:
        """Plant `plant` is served from now on, at step `t` with `dataset_size` points."""

    def plant_removed(self, plant: str) -> None:
        """Plant `plant` left the configuration: its series go."""

    def quarantined(self, plant: str) -> None:
        """Plant `plant` is set aside (its state could not be restored)."""

    def stopping(self) -> None:
        """The daemon began to shut down (`/healthz` answers 503 from now on)."""

    def close(self) -> None:
        """Stop serving."""


class PrometheusMetrics(Metrics):
    """Counters, histograms and gauges in a private registry, served on `address:port`."""

    def __init__(self, address: str, port: int) -> None:
        import prometheus_client as pc

        from tvbod.protocol import REQUEST_TYPES, ErrorCode
        from tvbod.service.metrics_http import MetricsServer

        pc.disable_created_metrics()
        self.registry = reg = pc.CollectorRegistry()
        self.requests = pc.Counter("tvbod_requests", "Requests received, by request type "
                                   "(invalid: did not decode)", ["type"], registry=reg)
        self.errors = pc.Counter("tvbod_client_errors", "Error replies, by protocol error code",
                                 ["code"], registry=reg)
        self.resets = pc.Counter("tvbod_resets", "Trigger resets, by plant", ["plant"], registry=reg)
        self.abandoned = pc.Counter("tvbod_proposals_abandoned",
                                    "Proposals abandoned after proposal_timeout, by plant",
                                    ["plant"], registry=reg)
        self.violations = pc.Counter("tvbod_safety_violations", "Measurements beyond the "
                                     "safety threshold and failed experiments of plants with "
                                     "safety:, by plant", ["plant"], registry=reg)
        self.latency = pc.Histogram("tvbod_request_duration_seconds", "Service time of ask, "
                                    "tell and observe in the daemon", ["type"], buckets=_BUCKETS,
                                    registry=reg)
        self.fsyncs = pc.Histogram("tvbod_fsync_duration_seconds", "Group commit: fsync of the "
                                   "journals of one batch of requests", buckets=_BUCKETS,
                                   registry=reg)
        self.step = pc.Gauge("tvbod_plant_step", "The step t the plant's next proposal has",
                             ["plant"], registry=reg)
        self.dataset = pc.Gauge("tvbod_plant_dataset_points", "Points in the plant's GP dataset",
                                ["plant"], registry=reg)
        self.quarantine = pc.Gauge("tvbod_plant_quarantined", "1 while the plant is quarantined "
                                   "(its state could not be restored), else 0", ["plant"],
                                   registry=reg)
        self.safe_fraction = pc.Gauge("tvbod_plant_safe_fraction", "Share of the gain box "
                                      "certified safe after the last measurement (plants with "
                                      "safety:)", ["plant"], registry=reg)
        self._per_plant = (self.resets, self.abandoned, self.violations, self.step, self.dataset,
                           self.quarantine, self.safe_fraction)
        self._build_info(pc, reg)
        for kind in (*REQUEST_TYPES, "invalid"):
            self.requests.labels(kind)
        for kind in TIMED:
            self.latency.labels(kind)
        for code in ErrorCode:
            self.errors.labels(str(code))
        self.served: set[str] = set()
        self.set_aside: set[str] = set()
        self.http = MetricsServer(address, port, reg, self.health)

    def _build_info(self, pc, reg) -> None:
        from tvbod import __version__
        from tvbod.core.behaviours import NEWEST

        info = pc.Gauge("tvbod_build_info", "1, labelled with the tvbod version, the Python "
                        "version and the behaviour version new state is written with",
                        ["version", "python", "behaviour"], registry=reg)
        info.labels(__version__, platform.python_version(), str(NEWEST)).set(1)

    def health(self) -> dict[str, Any]:
        """What `/healthz` answers while the daemon serves."""
        return {"status": "ok", "plants": len(self.served), "quarantined": sorted(self.set_aside)}

    def message(self, kind: str) -> None:
        self.requests.labels(kind).inc()

    def client_error(self, code: str) -> None:
        self.errors.labels(code).inc()

    def request(self, kind: str, seconds: float) -> None:
        self.latency.labels(kind).observe(seconds)

    def fsync(self, seconds: float) -> None:
        self.fsyncs.observe(seconds)

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        plant = fields.get("plant")
        if plant is None or fields.get("replayed") or plant not in self.served:
            return
        if event == "reset":
            self.resets.labels(plant).inc()
        elif event == "proposal_abandoned":
            self.abandoned.labels(plant).inc()
        elif event == "safety_violation":
            self.violations.labels(plant).inc()
        elif event == "measurement":
            self.step.labels(plant).set(fields["t"] + 1)
            self.dataset.labels(plant).set(fields["dataset_size"])
            if fields.get("safe_fraction") is not None:
                self.safe_fraction.labels(plant).set(fields["safe_fraction"])

    def plant_served(self, plant: str, t: int, dataset_size: int, safety: bool) -> None:
        self.plant_removed(plant)
        self.served.add(plant)
        self.resets.labels(plant)
        self.abandoned.labels(plant)
        if safety:
            self.violations.labels(plant)
        self.step.labels(plant).set(t)
        self.dataset.labels(plant).set(dataset_size)
        self.quarantine.labels(plant).set(0)

    def plant_removed(self, plant: str) -> None:
        self.served.discard(plant)
        self.set_aside.discard(plant)
        for metric in self._per_plant:
            try:
                metric.remove(plant)
            except KeyError:
                pass

    def quarantined(self, plant: str) -> None:
        self.plant_removed(plant)
        self.set_aside.add(plant)
        self.quarantine.labels(plant).set(1)

    def stopping(self) -> None:
        self.http.stopping = True

    def close(self) -> None:
        self.http.close()


def create(endpoint: tuple[str, int] | None) -> Metrics:
    """The daemon's metrics: served on `endpoint`, or none at all (raises OSError if the port is
    taken)."""
    return Metrics() if endpoint is None else PrometheusMetrics(*endpoint)
