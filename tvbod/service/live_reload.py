"""SIGHUP: the daemon and plant files applied anew, all or nothing (mixed into `Server`).

`tvbod/service/reload.py` says which changes a live reload may apply; this is the part that opens
added plants, closes removed ones and switches changed ones (`PlantRuntime.reconfigure`).
"""

from __future__ import annotations

import dataclasses
import sys

from tvbod.service.config import ConfigError, load_daemon_config
from tvbod.service.plant import PlantRuntime, RestoreError
from tvbod.service.reload import ReloadRefused, plan_reload
from tvbod.service.store import StorageError


class LiveReload:
    """`Server.reload`, using the server's `config`, `plants`, `quarantined`, `metrics`, `sink`,
    `_open_plant` and `_open_or_quarantine`."""

    def reload(self) -> bool:
        """Apply the daemon and plant files anew (SIGHUP), all or nothing.

        New plants are restored and served, removed plants are checkpointed and closed, changed
        plants keep their data under the new optimizer settings (tvbod/service/reload.py says
        which changes are allowed). An invalid or refused configuration changes nothing.
        """
        try:
            # Resolve `log_format: auto` as the start did, or it would always look changed.
            new = load_daemon_config(self.config.path, isatty=sys.stdout.isatty())
            # A quarantined plant is opened anew, as if added; failing again leaves it aside.
            # The served plants' configurations are the runtimes' (`inherit` at restore).
            served = dataclasses.replace(self.config, plants=type(self.config.plants)(
                self.plants[p.name].config if p.name in self.plants else p
                for p in self.config.plants if p.name not in self.quarantined))
            plan = plan_reload(served, new)
            retry = [pc for pc in plan.added if pc.name in self.quarantined]
            plan.added = [pc for pc in plan.added if pc.name not in self.quarantined]
            prepared = [(pc, self.plants[pc.name].prepare_reconfigure(pc), keys)
                        for pc, keys in plan.changed]
        except (ConfigError, ReloadRefused) as exc:
            self.sink.emit("config_reload_failed", level="error", error=str(exc),
                           action="the running configuration is kept")
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. a state that does not fit the new spec
            self.sink.emit("config_reload_failed", level="error", error=repr(exc),
                           action="the running configuration is kept")
            return False
        opened: dict[str, PlantRuntime] = {}
        try:
            for pc in plan.added:
                opened[pc.name] = self._open_plant(pc)
        except (RestoreError, Exception) as exc:  # noqa: BLE001
            for runtime in opened.values():
                runtime.close()
            self.sink.emit("config_reload_failed", level="error", error=str(exc),
                           action="the running configuration is kept")
            return False
        for name in plan.removed:
            runtime = self.plants.pop(name)
            try:
                runtime.checkpoint("removed")
            except StorageError as exc:
                runtime.events.emit("storage_error", level="error", what="checkpoint", error=str(exc))
            runtime.events.emit("plant_removed", t=runtime.strategy.t)
            runtime.close()
        for pc, strategy, keys in prepared:
            self.plants[pc.name].reconfigure(pc, strategy, keys)
        self.plants.update(opened)
        for runtime in self.plants.values():
            runtime.request_cache = new.request_cache
            runtime.checkpoint_every = new.checkpoint_every
            runtime.ask_time_budget_ms = new.ask_time_budget_ms
            runtime.events_segment_bytes = new.events_segment_bytes
            runtime.events_keep_segments = new.events_keep_segments
        for name in set(self.quarantined) - {pc.name for pc in new.plants}:
            del self.quarantined[name]
            self.metrics.quarantined(name, False)
        for pc in retry:
            self._open_or_quarantine(pc)
        self.config = dataclasses.replace(
            new, **{k: getattr(self.config, k) for k in plan.restart_only})
        self.sink.emit("config_reloaded", added=[p.name for p in plan.added], removed=plan.removed,
                       changed={pc.name: keys for pc, keys in plan.changed},
                       restart_required_for=plan.restart_only)
        return True
