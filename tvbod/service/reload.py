"""What a configuration reload (SIGHUP) may change while plants keep their data.

A plant's stored data are measurements on the GP's internal scale at internal coordinates, so a
change that alters what stored numbers *mean* cannot be applied live: the strategy preset, the
domain (parameters, bounds, scaling), the sense, the measurement offset/scale and a matrix
kernel. Everything else (delta_b, beta, noise variance, kernel lengthscales and variance,
hyperparameter fitting, optimizer budget, seed, reset period, forgetting, drift variance) is
applied by rebuilding the strategy from its `state_dict`, which refactorizes the GP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tvbod.core import Strategy, make_strategy
from tvbod.core.behaviours import FIXED, spelled
from tvbod.core.spec import OptimizerSpec
from tvbod.errors import TvbodError
from tvbod.service.config import DaemonConfig, PlantConfig, inherit

#: Dotted optimizer keys (and their sub-keys) that a live reload must not change.
FROZEN = ("strategy", "domain", "sense", "measurement", "kernel.type", "kernel.matrix")
#: Daemon keys that only a restart applies.
RESTART_ONLY = ("endpoints", "runtime_dir", "state_dir", "log_format", "max_message_bytes",
                "max_pending_per_client", "curve")


def rebuild_strategy(state: Mapping[str, Any], optimizer: Mapping | OptimizerSpec, *,
                     keep_pending: bool) -> Strategy:
    """The one "rebuild under new settings" rule: a strategy for `optimizer` holding `state` (a
    `state_dict`), which refactorizes the GP. Unless `keep_pending` (the prepared point was issued
    as a proposal, or the settings are the same), the prepared point is dropped, so the next ask
    recomputes it under the new settings. Used by a live reload, a start with a changed plant
    file, and `tvbod replay` at every configuration switch the daemon recorded."""
    state = dict(state)
    if not keep_pending:
        state["pending"] = None
    strategy = make_strategy(optimizer)
    strategy.load_state_dict(state)
    return strategy


class ReloadRefused(TvbodError):
    """The new configuration cannot be applied live; the old one keeps running."""


def _flatten(m: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(m, Mapping):
        out: dict[str, Any] = {}
        for k, v in m.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: m}


def changed_keys(old: Mapping, new: Mapping) -> list[str]:
    """Dotted keys whose values differ between two optimizer mappings, each with every setting
    of its behaviour version spelled out (`behaviours.spelled`)."""
    a, b = _flatten(spelled(old)), _flatten(spelled(new))
    return sorted(k for k in set(a) | set(b) if a.get(k, None) != b.get(k, None))


def frozen_changes(old: Mapping, new: Mapping) -> list[str]:
    """The changed keys that a live reload must refuse (a fixed setting follows the behaviour
    version: a start under a newer one applies it as a change)."""
    return [k for k in changed_keys(old, new) if k not in FIXED
            and any(k == f or k.startswith(f + ".") for f in FROZEN)]


@dataclass
class ReloadPlan:
    added: list[PlantConfig] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[tuple[PlantConfig, list[str]]] = field(default_factory=list)
    restart_only: list[str] = field(default_factory=list)


def plan_reload(old: DaemonConfig, new: DaemonConfig) -> ReloadPlan:
    """Compare two daemon configurations; raise `ReloadRefused` naming every frozen change."""
    plan = ReloadPlan()
    old_plants = {p.name: p for p in old.plants}
    problems = []
    for pc in new.plants:
        before = old_plants.get(pc.name)
        if before is None:
            plan.added.append(pc)
            continue
        pc = inherit(pc, before.optimizer_mapping)
        keys = changed_keys(before.optimizer_mapping, pc.optimizer_mapping)
        frozen = frozen_changes(before.optimizer_mapping, pc.optimizer_mapping)
        if frozen:
            problems.append(f"plant {pc.name!r} ({pc.path}): {', '.join('optimizer.' + k for k in frozen)} "
                            "cannot change while the plant keeps its data")
        elif keys or pc != before:
            plan.changed.append((pc, keys))
    plan.removed = sorted(set(old_plants) - {p.name for p in new.plants})
    plan.restart_only = [k for k in RESTART_ONLY if getattr(old, k) != getattr(new, k)]
    if problems:
        raise ReloadRefused("; ".join(problems) + " (restart with the old state moved aside to "
                            "start those plants afresh)")
    return plan
