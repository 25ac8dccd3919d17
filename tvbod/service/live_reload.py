"""SIGHUP: the daemon and plant files applied anew, all or nothing, to a `PlantHost`.

`tvbod/service/reload.py` says which changes a live reload may apply; this is the part that opens
added plants, closes removed ones and switches changed ones to their new settings.
"""

from __future__ import annotations

import dataclasses
import sys

from tvbod.core import Strategy
from tvbod.service.checkpoints import CheckpointPolicy
from tvbod.service.config import ConfigError, DaemonConfig, PlantConfig, load_daemon_config
from tvbod.service.hosted import PlantHost
from tvbod.service.plant import PlantRuntime
from tvbod.service.reload import ReloadPlan, ReloadRefused, plan_reload, rebuild_strategy
from tvbod.service.store import StorageError


def reload(host: PlantHost) -> bool:
    """Apply the daemon and plant files anew (SIGHUP), all or nothing; True if applied.

    New plants are restored and served, removed plants are checkpointed and closed, changed
    plants keep their data under the new optimizer settings (tvbod/service/reload.py says
    which changes are allowed). An invalid or refused configuration changes nothing.
    """
    try:
        new, plan, retry, rebuilt = _plan(host)
    except (ConfigError, ReloadRefused) as exc:
        return _refused(host, str(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. a state that does not fit the new spec
        return _refused(host, repr(exc))
    opened: dict[str, PlantRuntime] = {}
    try:
        for pc in plan.added:
            opened[pc.name] = host.open_plant(pc)
    except Exception as exc:  # noqa: BLE001 - a restore refused, or any other failure
        for runtime in opened.values():
            runtime.close()
        return _refused(host, str(exc))
    for name in plan.removed:
        host.release(name, "removed")
    for pc, strategy, keys in rebuilt:
        switch_settings(host.plants[pc.name], pc, strategy, keys)
    host.plants.update(opened)
    for runtime in opened.values():
        host.served(runtime)
    for runtime in host.plants.values():
        apply_daemon_settings(runtime, new)
    for name in set(host.quarantined) - {pc.name for pc in new.plants}:
        del host.quarantined[name]
        host.metrics.plant_removed(name)
    for pc in retry:
        host.open_or_quarantine(pc)
    host.config = dataclasses.replace(
        new, **{k: getattr(host.config, k) for k in plan.restart_only})
    host.sink.emit("config_reloaded", added=[p.name for p in plan.added], removed=plan.removed,
                   changed={pc.name: keys for pc, keys in plan.changed},
                   restart_required_for=plan.restart_only)
    return True


def _plan(host: PlantHost) -> tuple[DaemonConfig, ReloadPlan, list, list]:
    """`(new daemon config, plan, quarantined plants to retry, (config, strategy, changed keys)
    of each changed plant)`; raises when the files are invalid or the change is refused."""
    # Resolve `log_format: auto` as the start did, or it would always look changed.
    new = load_daemon_config(host.config.path, isatty=sys.stdout.isatty())
    # A quarantined plant is opened anew, as if added; failing again leaves it aside.
    # The served plants' configurations are the runtimes' (`inherit` at restore).
    served = dataclasses.replace(host.config, plants=type(host.config.plants)(
        host.plants[p.name].config if p.name in host.plants else p
        for p in host.config.plants if p.name not in host.quarantined))
    plan = plan_reload(served, new)
    retry = [pc for pc in plan.added if pc.name in host.quarantined]
    plan.added = [pc for pc in plan.added if pc.name not in host.quarantined]
    rebuilt = [(pc, rebuilt_strategy(host.plants[pc.name], pc), keys)
               for pc, keys in plan.changed]
    return new, plan, retry, rebuilt


def _refused(host: PlantHost, error: str) -> bool:
    host.sink.emit("config_reload_failed", level="error", error=error,
                   action="the running configuration is kept")
    return False


def rebuilt_strategy(plant: PlantRuntime, config: PlantConfig) -> Strategy:
    """A strategy for the new configuration holding `plant`'s exact state (may raise); a
    prepared, unissued point is recomputed under the new settings."""
    return rebuild_strategy(plant.strategy.state_dict(), config.optimizer,
                            keep_pending=plant.proposal is not None)


def switch_settings(plant: PlantRuntime, config: PlantConfig, strategy: Strategy,
                    changed: list[str]) -> None:
    """Switch `plant` to a new configuration (with `rebuilt_strategy`'s strategy) and checkpoint
    at once, so the checkpoint, the journal after it and the event history agree on it."""
    old = plant.config.fingerprint
    plant.state.config, plant.state.strategy = config, strategy
    plant.events.emit("config_reloaded", t=strategy.t, at="reload", changed=changed,
                      fingerprint=plant.record_optimizer(), previous_fingerprint=old,
                      pending=(plant.proposal or {}).get("id"))
    try:
        plant.checkpoint("reload")
    except StorageError:
        pass  # reported as storage_error; the next periodic checkpoint tries again


def apply_daemon_settings(plant: PlantRuntime, daemon: DaemonConfig) -> None:
    """The daemon file's per-plant settings, anew: the request cache's size, the checkpoint and
    event-log policy, the proposal time budget."""
    plant.state.request_cache = daemon.request_cache
    plant.checkpointer.policy = CheckpointPolicy(daemon.checkpoint_every,
                                                 daemon.events_segment_bytes,
                                                 daemon.events_keep_segments)
    plant.budget.budget_ms = daemon.ask_time_budget_ms
