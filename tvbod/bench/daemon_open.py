"""`tvbod bench daemon --box-plants N --arms-plants M ...`: the open-loop load run, end to end.

1. A daemon (`python -m tvbod run`) on a temporary directory with the plants (daemon_plants).
2. Seeding (if `--box-n` or `--refit-probe`): every box plant observes random gains through the
   protocol's `observe` until it holds that many points. To make that cheap, the box plants are
   seeded with `refit_every` raised out of reach; then the daemon is stopped (final checkpoint)
   and restarted with the plant files exactly as shipped (MAP refit after every tell), which also
   measures time to READY on a seeded state. Then each seeded plant takes one step (phase
   `prime`): its first refit on the seeded data starts cold, unlike the warm-started refits of a
   plant whose dataset grew step by step, so it is reported apart.
3. The timed phases (daemon_load): `steady` (every plant stepping), or with `--refit-probe` one
   plant at n = `--probe-n` in group `probe` that stays idle in phase `without` and steps in
   phase `with`, the other plants stepping in both: their p99 side by side shows whether one
   plant's refit delays other plants' replies.

A deadline (`--ready-timeout`, `--seed-timeout`, `--deadline`) ends the phase it hits; what was
measured is reported, marked incomplete. Prints progress, a table and the goal lines; `--out`
writes results.json (and latency.png with `--plot`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tvbod.bench.daemon_proc import DaemonProcess, write_daemon_file
from tvbod.errors import TvbodError

# The CLI imports this module to build its parser: numpy, zmq and yaml are imported on use.

#: `refit_every` of the box plants while they are seeded (no refit during seeding).
SEED_REFIT_EVERY = 1_000_000_000


class _Deadline(TvbodError):
    """The run's `--deadline` passed between two phases."""


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; a count is >= 0")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be in [0, 1) (a share of the period)")
    return value


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ready-timeout", type=_positive, default=600.0,
                        help="seconds a daemon start may take to READY; a slower start is "
                             "reported, not raised (default 600)")
    g = parser.add_argument_group("open-loop load (any of --box-plants, --arms-plants, "
                                  "--refit-probe selects it)")
    g.add_argument("--box-plants", type=_count, default=0,
                   help="plants with the shipped cart-pole optimizer mapping (MAP refit each tell)")
    g.add_argument("--box-rate", type=_positive, default=1.0, help="their steps/s (default 1)")
    g.add_argument("--box-n", type=_count, default=0,
                   help="observations seeded into each box plant before the timed phase")
    g.add_argument("--arms-plants", type=_count, default=0,
                   help="plants with the shipped temperature mapping (50 arms)")
    g.add_argument("--arms-rate", type=_positive, default=10.0, help="their steps/s (default 10)")
    g.add_argument("--refit-probe", action="store_true",
                   help="add one box plant seeded to --probe-n; phases `without` / `with` it")
    g.add_argument("--probe-n", type=_count, default=300, help="its dataset size (default 300)")
    g.add_argument("--probe-rate", type=_positive, default=1.0, help="its steps/s (default 1)")
    g.add_argument("--duration", type=_positive, default=30.0, help="seconds per timed phase")
    g.add_argument("--ask-gap", type=_fraction, default=0.5,
                   help="periods between a tell's reply and a ready ask (default 0.5)")
    g.add_argument("--waiting-every", type=_count, default=5,
                   help="every k-th step asks at once on the tell's reply (0: never; default 5)")
    g.add_argument("--seed-timeout", type=_positive, default=1800.0,
                   help="seconds the seeding may take (default 1800)")
    g.add_argument("--deadline", type=_positive, default=None,
                   help="seconds for the whole run; the phase it hits ends, marked incomplete")
    g.add_argument("--progress", type=_positive, default=5.0, help="seconds between progress lines")
    g.add_argument("--plot", action="store_true", help="with --out: latency.png (plots extra)")
    g.add_argument("--workdir", type=Path, default=None,
                   help="keep the daemon's files (plants, state, logs) here (a new directory) "
                        "instead of a temporary one")


def is_load_run(args: argparse.Namespace) -> bool:
    return bool(args.box_plants or args.arms_plants or args.refit_probe)


def plant_specs(args: argparse.Namespace) -> list:
    from tvbod.bench.daemon_load import PlantSpec

    specs = [PlantSpec(f"box{i:03d}", "box", "box", args.box_rate, args.box_n)
             for i in range(args.box_plants)]
    specs += [PlantSpec(f"arms{i:03d}", "arms", "arms", args.arms_rate)
              for i in range(args.arms_plants)]
    if args.refit_probe:
        specs.append(PlantSpec("probe", "box", "probe", args.probe_rate, args.probe_n))
    return specs


def _write_plants(root: Path, specs: list, seeding: bool) -> None:
    from tvbod.bench.daemon_plants import write_plant

    for s in specs:
        write_plant(root / "plants", s.kind, s.name,
                    SEED_REFIT_EVERY if seeding and s.kind == "box" else None)


def _start(root: Path, log_name: str, what: str, result: dict, timeout: float) -> DaemonProcess:
    daemon = DaemonProcess(root, log_name)
    daemon.start()
    ready = daemon.wait_ready(timeout)
    print(f"[bench daemon] daemon start ({what}): " + ("not READY" if ready is None else
          f"READY in {ready:.2f} s"), file=sys.stderr, flush=True)
    entry: dict[str, Any] = {"what": what, "plants": result["plants"], "ready_s": ready}
    if ready is None:
        entry["reason"] = ("the daemon exited" if not daemon.alive()
                           else f"not READY within {timeout:g} s")
        entry["log_tail"] = daemon.log_tail()
        result.setdefault("incomplete", []).append(f"{what} start: {entry['reason']}")
    result["starts"].append(entry)
    return daemon


def _timed_phases(args, gen, deadline: float) -> list[dict[str, Any]]:
    light = {s.spec.group for s in gen.plants} - {"probe"}
    plan = ([("without", light), ("with", light | {"probe"})] if args.refit_probe
            else [("steady", light)])
    out = []
    for i, (name, groups) in enumerate(plan):
        if time.perf_counter() >= deadline:
            gen.log(f"the run's deadline passed before phase {name}")
            raise _Deadline(f"the run's deadline passed before phase {name}")
        gen.log(f"phase {name}: {args.duration:g} s ({', '.join(sorted(groups))})")
        out.append(gen.run_phase(name, groups, args.duration, args.warmup if i == 0 else 0.0,
                                 deadline))
        if not out[-1]["complete"] and not gen.daemon.alive():
            break
    return out


def _endpoint(args, root: Path) -> str:
    """The first of `--transport`: ipc under `root`, or tcp on 127.0.0.1:`--port`."""
    transport = args.transport.split(",")[0]
    return f"tcp://127.0.0.1:{args.port}" if transport == "tcp" else f"ipc://{root}/run/tvbod.sock"


def _drive(args, root: Path, endpoint: str, specs: list, result: dict, deadline: float) -> None:
    from tvbod.bench.daemon_load import LoadGenerator

    seeding = any(s.seed_n for s in specs)
    daemon = _start(root, "daemon.log", "fresh", result, args.ready_timeout)
    gen = None
    try:
        if result["starts"][-1]["ready_s"] is None:
            return
        gen = LoadGenerator(endpoint, specs, daemon,
                            ask_gap=args.ask_gap, waiting_every=args.waiting_every,
                            progress_s=args.progress)
        gen.watch_daemon(daemon)
        why = gen.hello(args.ready_timeout)
        if why:
            result.setdefault("incomplete", []).append(f"hello: {why}")
            return
        phases = result["phases"]
        if seeding:
            gen.log(f"seeding {sum(1 for s in specs if s.seed_n)} plant(s) through observe")
            budget = min(args.seed_timeout, max(0.0, deadline - time.perf_counter()))
            phases.append(gen.seed(budget))
            daemon.stop()
            _write_plants(root, specs, seeding=False)
            daemon = _start(root, "daemon-2.log", "restart after seeding", result,
                            args.ready_timeout)
            if result["starts"][-1]["ready_s"] is None:
                return
            gen.watch_daemon(daemon)
            gen.log("prime: one step of every seeded plant (its first, cold refit)")
            phases.append(gen.prime(min(args.seed_timeout,
                                        max(0.0, deadline - time.perf_counter()))))
        phases += _timed_phases(args, gen, deadline)
    except _Deadline as exc:
        result.setdefault("incomplete", []).append(str(exc))
    finally:
        if gen is not None:
            _summarize(args, gen, result, deadline)
        daemon.stop()
        if gen is not None:
            gen.close()


def _summarize(args, gen, result: dict, deadline: float) -> None:
    """Wait briefly for the replies still out, then fill in every phase's groups."""
    from tvbod.bench.daemon_report import plot, summarize_groups

    unanswered = gen.finish(grace_s=min(30.0, max(2.0, deadline - time.perf_counter())))
    for ph in result["phases"]:
        ph["groups"] = summarize_groups(gen, ph, unanswered)
    result["stray_replies"] = gen.stray
    if args.plot and args.out and result["phases"]:
        result["plot"] = str(plot(result, gen, args.out))


def run_load(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run; returns results.json's content (also printed as a table)."""
    specs = plant_specs(args)
    result: dict[str, Any] = {
        "plants": len(specs), "starts": [], "phases": [],
        "settings": {k: getattr(args, k) for k in (
            "box_plants", "box_rate", "box_n", "arms_plants", "arms_rate", "refit_probe",
            "probe_n", "probe_rate", "duration", "warmup", "ask_gap", "waiting_every",
            "checkpoint_every", "model_workers")},
        "transport": args.transport.split(",")[0]}
    deadline = time.perf_counter() + args.deadline if args.deadline else math.inf
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tvbod-load-") as tmp:
        root = Path(tmp) if args.workdir is None else args.workdir
        if args.workdir is not None:
            root.mkdir(parents=True)  # a new directory: an old state would change the run
        endpoint = _endpoint(args, root)
        write_daemon_file(root, endpoint.replace(f"ipc://{root}/run", "ipc://{runtime_dir}"),
                          args.model_workers, args.checkpoint_every)
        _write_plants(root, specs, seeding=any(s.seed_n for s in specs))
        _drive(args, root, endpoint, specs, result, deadline)
    from tvbod.bench.daemon_report import format_table, goal_lines

    result["complete"] = not result.get("incomplete") and all(
        ph["complete"] for ph in result["phases"])
    print(format_table(result))
    for line in goal_lines(result):
        print(line)
    if args.out:
        (args.out / "results.json").write_text(json.dumps(result, indent=2, default=str))
    print("complete" if result["complete"] else
          "INCOMPLETE: " + "; ".join(result.get("incomplete", []) + [
              f"{ph['phase']}: {ph['reason']}" for ph in result["phases"] if not ph["complete"]]),
          file=sys.stderr)
    return result
