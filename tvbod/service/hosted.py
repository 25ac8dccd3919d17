"""The plants a daemon hosts, and what hosting them takes: the context the server's parts share.

`PlantHost` is passed explicitly to the request handlers (tvbod/service/requests.py), the group
commit (group_commit.py) and the live reload (live_reload.py): the served plants by name, the
quarantined ones with the reason, the daemon configuration, the event sink, the metrics and the
model workers. It opens a plant (restore from its files) or sets it aside (quarantine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tvbod.errors import TvbodError
from tvbod.protocol import ErrorCode, ProtocolError
from tvbod.service.config import DaemonConfig
from tvbod.service.events import EventSink
from tvbod.service.metrics import Metrics
from tvbod.service.plant import PlantRuntime
from tvbod.service.store import PlantStore, StorageError
from tvbod.service.workers import ModelWorkers


@dataclass
class PlantHost:
    """The hosted plants and the daemon-wide collaborators they are served with.

    `writer`: the fault-injection writer the plants' stores use (tvbod/service/faults.py; None
    in production); `messages`: messages received; `started`: the wall-clock start."""

    config: DaemonConfig
    sink: EventSink
    metrics: Metrics
    workers: ModelWorkers
    writer: Callable[..., Any] | None = None
    plants: dict[str, PlantRuntime] = field(default_factory=dict)
    quarantined: dict[str, str] = field(default_factory=dict)
    messages: int = 0
    started: float = field(default_factory=time.time)

    def open_plant(self, pc) -> PlantRuntime:
        """A runtime for plant config `pc`, restored from its files (raises if it cannot be)."""
        cfg = self.config
        store = PlantStore(Path(cfg.state_dir), pc.name, writer=self.writer)
        store.directory.mkdir(parents=True, exist_ok=True)
        runtime = PlantRuntime(
            pc, store, self.sink.plant(pc.name, store.events_path),
            request_cache=cfg.request_cache, checkpoint_every=cfg.checkpoint_every,
            ask_time_budget_ms=cfg.ask_time_budget_ms,
            events_segment_bytes=cfg.events_segment_bytes,
            events_keep_segments=cfg.events_keep_segments)
        try:
            runtime.restore()
        except Exception:
            runtime.close()
            raise
        return runtime

    def open_or_quarantine(self, pc) -> bool:
        """Serve plant `pc`, or set it aside when its state cannot be restored (a torn or
        poisoned state, a configuration it does not fit): the daemon then serves every other
        plant and answers this one's requests with `plant_unavailable`. Its files are kept as
        they are; a restart or a reload (SIGHUP) tries again. True if the plant is served."""
        try:
            self.plants[pc.name] = self.open_plant(pc)
        except Exception as exc:  # noqa: BLE001 - one plant's state must not stop the others
            reason = str(exc) if isinstance(exc, TvbodError) else f"{type(exc).__name__}: {exc}"
            self.quarantined[pc.name] = reason
            self.sink.emit("plant_quarantined", level="error", plant=pc.name, reason=reason,
                           directory=str(Path(self.config.state_dir) / "plants" / pc.name))
            self.metrics.quarantined(pc.name)
            return False
        self.quarantined.pop(pc.name, None)
        self.served(self.plants[pc.name])
        return True

    def served(self, runtime: PlantRuntime) -> None:
        """Tell the metrics that `runtime` is served: its series start at its restored values."""
        self.metrics.plant_served(runtime.name, runtime.strategy.t, runtime.strategy.dataset_size,
                                  runtime.config.optimizer.safety is not None)

    def use_metrics(self, metrics: Metrics) -> None:
        """Report to `metrics` from now on (they are created once the plants are restored and the
        sockets bound): every served plant's series and every quarantined plant's flag."""
        self.metrics = metrics
        for name in self.quarantined:
            metrics.quarantined(name)
        for runtime in self.plants.values():
            self.served(runtime)

    def plant(self, req) -> PlantRuntime:
        """The served plant `req` names, else `plant_unavailable` / `unknown_plant`."""
        plant = self.plants.get(req.plant)
        if plant is None and req.plant in self.quarantined:
            raise ProtocolError(ErrorCode.PLANT_UNAVAILABLE,
                                f"plant {req.plant!r} is quarantined: "
                                f"{self.quarantined[req.plant]}", req.request_id)
        if plant is None:
            raise ProtocolError(ErrorCode.UNKNOWN_PLANT,
                                f"no plant named {req.plant!r}; this daemon hosts "
                                f"{', '.join(sorted(self.plants)) or 'none'}", req.request_id)
        return plant

    def release(self, name: str, reason: str) -> None:
        """Stop serving plant `name` (a reload removed it): checkpoint, event, close."""
        runtime = self.plants.pop(name)
        try:
            runtime.checkpoint(reason)
        except StorageError as exc:
            runtime.events.emit("storage_error", level="error", what="checkpoint", error=str(exc))
        runtime.events.emit("plant_removed", t=runtime.strategy.t)
        runtime.close()
        self.metrics.plant_removed(name)
