"""`tvbod repair PLANT`: rebuild a plant that cannot be restored from its recorded history.

A quarantined plant (its checkpoints torn beyond recovery, its state poisoned by a non-finite
number, journal records missing) still has its history: every step's `measurement` event line,
and the journal records after its last checkpoint. Repair feeds those steps, in order, through
the same journal-then-apply path a live tell takes, under the plant's current configuration,
into a new plant directory, and stops at the first step it cannot take (not the next step, not
finite, out of bounds, refused by the measurement guard). It then replays the new directory's
history (`tvbod replay`'s verify) and only if that reproduces every step exactly swaps it in:
the old directory moves to `STATE/quarantine/PLANT-<UTC time>/`, never deleted. The daemon must
be stopped (repair takes its lock); start it again afterwards.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tvbod.errors import TvbodError


class RepairError(TvbodError):
    """The plant cannot be repaired; nothing was changed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant", help="the plant's name")
    from tvbod.service.daemon_file import CONFIG_HELP

    parser.add_argument("--config", type=Path, metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--dry-run", action="store_true",
                        help="rebuild and verify in a temporary directory, change nothing")
    parser.add_argument("--force", action="store_true",
                        help="rebuild even a plant that restores without errors")


def recorded_steps(plant_dir: Path) -> list[dict[str, Any]]:
    """Every step the plant recorded, in step order, as `measurement` event fields: the event
    history, then journaled tells after the checkpoint whose event line never got written."""
    from tvbod.service.event_files import base_state
    from tvbod.commands.replay import load_history
    from tvbod.service.state_check import recovered_copy

    base, problem = base_state(plant_dir)
    if base is not None or problem is not None:
        raise RepairError(f"the history before {plant_dir}'s oldest kept event segment was removed "
                          "by retention (events_keep_segments); repair needs every step")
    steps = {e["proposal_id"]: e for e in load_history(plant_dir)}
    try:
        records = recovered_copy(plant_dir).records_after_checkpoint
    except Exception:  # noqa: BLE001 - an unreadable journal leaves the event history
        records = []
    for r in records:
        if r.get("kind") in ("tell", "observe") and r.get("id") not in steps:
            steps[r["id"]] = {"t": r["t"], "proposal_id": r["id"], "x": r["x"],
                              "measurement": r["y"], "failed": r["failed"],
                              "raw_measurement": r["measurement"], "metadata": r.get("metadata"),
                              **({"observed": True} if r["kind"] == "observe" else {})}
    return sorted(steps.values(), key=lambda e: e["t"])


def rebuild(config, plant_config, steps: list[dict[str, Any]], state_dir: Path) -> dict[str, Any]:
    """Feed `steps` into a new plant under `state_dir`; `{kept, dropped, reason}`: the steps
    applied, and from the first one refused on, how many were left out and why."""
    import numpy as np

    from tvbod.protocol import ProtocolError
    from tvbod.service.events import EventSink
    from tvbod.service.measurement_checks import observation_point
    from tvbod.service.plant import PlantRuntime
    from tvbod.service.store import PlantStore

    store = PlantStore(state_dir, plant_config.name)
    runtime = PlantRuntime(plant_config, store, EventSink().plant(plant_config.name,
                                                                 store.events_path),
                           checkpoint_every=config.checkpoint_every)
    kept, reason = 0, None
    try:
        runtime.restore()
        for step in steps:
            rid = f"repair-{step['t']}"
            try:
                if step["t"] != runtime.strategy.t:
                    raise RepairError(f"the history jumps from step {runtime.strategy.t - 1} to "
                                      f"{step['t']}")
                if step.get("observed"):
                    x = observation_point(runtime.config, runtime.strategy,
                                          plant_config.gains(np.asarray(step["x"])), rid)
                    runtime.record_observation(x, float(step["measurement"]),
                                               step.get("metadata") or {}, rid, rid)
                else:
                    runtime.strategy.domain.to_internal(np.asarray(step["x"]))
                    runtime.record_tell(step, rid)
            except (ProtocolError, RepairError, ValueError, TypeError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                break
            kept += 1
            if runtime.checkpointer.due:
                runtime.store.journal.sync()
                runtime.checkpoint("periodic")
        runtime.store.journal.sync()
        runtime.synced()
        runtime.events.emit("plant_repaired", level="warning", t=runtime.strategy.t, kept=kept,
                            dropped=len(steps) - kept, reason=reason)
        runtime.checkpoint("repair")
    finally:
        runtime.close()
    return {"kept": kept, "dropped": len(steps) - kept, "reason": reason}


def _verified(plant_dir: Path, kept: int) -> str | None:
    """None if replaying the rebuilt history reproduces all `kept` steps, else why not."""
    from tvbod.service.event_files import load_epochs
    from tvbod.commands.replay import load_history, recorded_optimizer, verify

    history = load_history(plant_dir)
    n, problem, _, _ = verify(recorded_optimizer(plant_dir, None), history, load_epochs(plant_dir))
    if problem is None and n == kept == len(history):
        return None
    return problem or f"replay reproduced {n} of {kept} steps"


def _lock(state_dir: Path) -> int:
    """The daemon's lock on `state_dir` (repair never runs beside a daemon)."""
    fd = os.open(state_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RepairError(f"a tvbod daemon is using {state_dir}; stop it first (systemctl stop "
                          "tvbod), repair, then start it") from None
    return fd


def repair(config, name: str, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
    """Rebuild plant `name` of the daemon `config` (see the module's docstring)."""
    from tvbod.service.state_check import restore_problems

    try:
        plant_config = config.plant(name)
    except KeyError:
        raise RepairError(f"no plant named {name!r} in {config.path}") from None
    state_dir = Path(config.state_dir)
    plant_dir = state_dir / "plants" / name
    if not plant_dir.is_dir():
        raise RepairError(f"{plant_dir} does not exist: the plant has no state to repair")
    fd = _lock(state_dir)
    try:
        errors, _ = restore_problems(plant_dir)
        if not errors and not force:
            return {"errors": [], "changed": False}
        steps = recorded_steps(plant_dir)
        work = Path(tempfile.mkdtemp(prefix=f".repair-{name}-", dir=state_dir))
        try:
            done = rebuild(config, plant_config, steps, work)
            problem = _verified(work / "plants" / name, done["kept"])
            if problem is not None:
                raise RepairError(f"the rebuilt plant does not replay ({problem}); nothing changed")
            done.update(errors=errors, changed=not dry_run, total=len(steps))
            if not dry_run:
                done["kept_in"] = _swap(plant_dir, work / "plants" / name, state_dir, name)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        os.close(fd)
    return done


def _swap(plant_dir: Path, rebuilt: Path, state_dir: Path, name: str) -> Path:
    """Move `plant_dir` to `STATE/quarantine/` and the rebuilt directory into its place."""
    aside = state_dir / "quarantine" / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    aside.parent.mkdir(exist_ok=True, mode=0o700)
    os.rename(plant_dir, aside)
    os.rename(rebuilt, plant_dir)
    for directory in (aside.parent, plant_dir.parent):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return aside


def run(args: argparse.Namespace) -> int:
    from tvbod.service.config import ConfigError, load_daemon_config
    from tvbod.service.events import configure_logging

    configure_logging("console", stream=sys.stderr, level="error")
    try:
        config = load_daemon_config(args.config)
        done = repair(config, args.plant, args.dry_run, args.force)
    except (RepairError, ConfigError) as exc:
        print(f"tvbod repair: {exc}", file=sys.stderr)
        return 2
    if not done["errors"] and not done["changed"] and "kept" not in done:
        print(f"tvbod repair: plant {args.plant} restores without errors; nothing to repair "
              "(--force rebuilds it anyway)")
        return 0
    for error in done["errors"]:
        print(f"tvbod repair: found: {error}")
    first = done["total"] - done["dropped"] + 1
    dropped = (f"; left out steps {first}..{done['total']}, from the first one it cannot take: "
               f"{done['reason']}" if done["dropped"] else "")
    print(f"tvbod repair: plant {args.plant}: rebuilt {done['kept']} of {done['total']} recorded "
          f"steps{dropped}; replay verified")
    if done["changed"]:
        print(f"tvbod repair: the old files are kept in {done['kept_in']}; start the daemon to "
              "serve the plant")
    else:
        print("tvbod repair: dry run, nothing changed")
    return 0
