"""`tvbod bench memory`: the daemon's memory with many plants, and where it goes.

1. Plant files as `tvbod bench daemon`'s open-loop run writes them (daemon_plants: the shipped
   cart-pole mapping for `box` plants, the shipped temperature mapping for `arms` plants) in a
   temporary directory.
2. Seeding, in this process through the daemon's own code (`Server.open`, `PlantRuntime.observe`,
   the journal, checkpoints): each box plant observes `--box-n` random gains, each arms plant
   `--arms-n` arms, with the MAP refit deferred (`refit_every` out of reach, as the open-loop run
   seeds), so seeding costs appends, not refits.
3. A real daemon (`python -m tvbod run`) on that state with the plant files as shipped: RSS at
   READY, then one step (ask, tell) of every plant at once over ZeroMQ, the box plants' tells each
   starting a cold MAP refit at n = `--box-n` on the two model threads, then one more ask of
   every plant, answered when its refit and next proposal are done: RSS and peak (VmHWM).
   `--steady S` adds S seconds of the open-loop load (every plant at its rate) after that.
4. The breakdown, in a fresh interpreter on the same state (tvbod/bench/memory_probe.py): RSS of
   the interpreter, the imports, the restore, the proposals, after `malloc_trim(0)`; glibc's free
   heap bytes; numpy arrays and Python objects per plant by attribute; tracemalloc's top sites.

The daemon inherits this process's environment (e.g. `MALLOC_ARENA_MAX`), so the effect of a
malloc setting is measured by running the benchmark under it. Prints the tables and the goal line;
`--out` writes results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tvbod.bench.daemon_open import SEED_REFIT_EVERY, _count, _positive
from tvbod.bench.daemon_proc import DaemonProcess, memory_mb, write_daemon_file

#: The memory goal (docs/benchmarks.md, *The daemon*).
RSS_GOAL_MB = 200.0
#: Records between the seeding's fsyncs (the seeding's durability does not matter).
_SEED_SYNC_EVERY = 50


#: `tvbod bench memory`'s options: (flag, type or "flag", default, help).
_OPTIONS = (
    ("--box-plants", "count", 100, "plants with the shipped cart-pole mapping (default 100)"),
    ("--box-n", "count", 300, "observations seeded into each box plant (default 300)"),
    ("--arms-plants", "count", 100, "plants with the shipped temperature mapping (default 100)"),
    ("--arms-n", "count", 200, "observations seeded into each arms plant (default 200: 20 s at "
     "10 Hz, the open-loop run's steady phase)"),
    ("--steady", float, 0.0, "seconds of open-loop load after the one step (default 0: none)"),
    ("--box-rate", "positive", 1.0, "with --steady (default 1)"),
    ("--arms-rate", "positive", 10.0, "with --steady (default 10)"),
    ("--no-daemon", "flag", False, "only the in-process breakdown, no daemon process"),
    ("--no-breakdown", "flag", False, "only the daemon's numbers, no in-process breakdown"),
    ("--ready-timeout", "positive", 600.0, "seconds the daemon may take to READY (default 600)"),
    ("--step-timeout", "positive", 1800.0,
     "seconds the one step of every plant may take (default 1800)"),
    ("--workdir", Path, None, "keep the files here (a new directory) instead of a temporary one"),
    ("--seeded", Path, None, "copy this earlier --workdir (same plant counts) instead of seeding: "
     "to compare settings on one seeded state"),
    ("--out", Path, None, "write results.json here"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    types = {"count": _count, "positive": _positive}
    for flag, kind, default, help_ in _OPTIONS:
        if kind == "flag":
            parser.add_argument(flag, action="store_true", help=help_)
        else:
            parser.add_argument(flag, type=types.get(kind, kind), default=default, help=help_)


def _log(line: str) -> None:
    print(f"[bench memory] {line}", file=sys.stderr, flush=True)


def _specs(args: argparse.Namespace) -> list:
    from tvbod.bench.daemon_load import PlantSpec

    return ([PlantSpec(f"box{i:03d}", "box", "box", args.box_rate, args.box_n)
             for i in range(args.box_plants)]
            + [PlantSpec(f"arms{i:03d}", "arms", "arms", args.arms_rate, args.arms_n)
               for i in range(args.arms_plants)])


def _write_plants(root: Path, specs: list, seeding: bool) -> None:
    from tvbod.bench.daemon_plants import write_plant

    for s in specs:
        write_plant(root / "plants", s.kind, s.name,
                    SEED_REFIT_EVERY if seeding and s.kind == "box" else None)


def seed(root: Path, specs: list) -> dict[str, Any]:
    """Observe `seed_n` random points into every plant, through the daemon's own code; returns
    the seconds taken and the dataset sizes reached."""
    from tvbod.bench.daemon_plants import SimulatedPlant
    from tvbod.bench.memory_probe import _server
    from tvbod.protocol import Observe

    t0 = time.perf_counter()
    server = _server(str(root / "tvbod.yaml"))
    server.open()
    sizes = {}
    try:
        for index, spec in enumerate(specs):
            plant = server.plants[spec.name]
            sim = SimulatedPlant(spec.kind, plant.readouts.describe()["parameters"], seed=index)
            for k in range(spec.seed_n):
                gains = sim.random_gains()
                plant.observe(Observe(f"seed-{k}", plant=spec.name, gains=gains,
                                      measurement=sim.measure(gains)))
                if (k + 1) % _SEED_SYNC_EVERY == 0 or k + 1 == spec.seed_n:
                    plant.store.journal.sync()
                    plant.synced()
                    if plant.checkpointer.due:
                        plant.checkpoint("seed")
            sizes[spec.name] = plant.strategy.dataset_size
    finally:
        server.shutdown()  # a final checkpoint of every plant
    return {"seconds": time.perf_counter() - t0, "dataset_size": sizes}


def _copy_seeded(source: Path, root: Path) -> None:
    """The files of an earlier run's `--workdir` (its plants, daemon file and state) into `root`."""
    import shutil

    if not (source / "tvbod.yaml").is_file():
        raise SystemExit(f"tvbod bench memory: --seeded {source} has no tvbod.yaml "
                         "(not a --workdir)")
    shutil.copytree(source, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("run", "*.log", "notify.sock", "daemon.lock"))


def daemon_run(args: argparse.Namespace, root: Path, specs: list) -> dict[str, Any]:
    """The real daemon on the seeded state: RSS at READY, after one step of every plant (each
    box plant's first, cold refit) and, with `--steady`, after that many seconds of load."""
    from tvbod.bench.daemon_load import LoadGenerator

    daemon = DaemonProcess(root, "daemon.log")
    out: dict[str, Any] = {"complete": False}
    daemon.start()
    gen = None
    try:
        out["ready_s"] = daemon.wait_ready(args.ready_timeout)
        if out["ready_s"] is None:
            out["reason"] = f"not READY within {args.ready_timeout:g} s"
            return out
        out["ready"] = memory_mb(daemon.pid)
        gen = LoadGenerator(f"ipc://{root}/run/tvbod.sock", specs, daemon, log=_log)
        gen.watch_daemon(daemon)
        why = gen.hello(args.ready_timeout)
        if why:
            out["reason"] = f"hello: {why}"
            return out
        _log(f"one step of all {len(specs)} plants (the box plants' cold refits)")
        step = gen.prime(args.step_timeout)
        if step["complete"]:  # an ask per plant, answered once its refit and proposal are done
            asked = gen.ask_all(args.step_timeout)
            step = {**asked, "seconds": step["seconds"] + asked["seconds"],
                    "complete": asked["complete"], "reason": asked["reason"]}
        out["step"] = {k: step[k] for k in ("seconds", "rss_mb", "hwm_mb", "complete", "reason")}
        if args.steady > 0 and step["complete"]:
            _log(f"{args.steady:g} s of open-loop load")
            ph = gen.run_phase("steady", {"box", "arms"}, args.steady)
            out["steady"] = {k: ph[k] for k in ("seconds", "rss_mb", "hwm_mb", "complete",
                                                "reason")}
        out["complete"] = step["complete"] and out.get("steady", {}).get("complete", True)
        out["peak_mb"] = memory_mb(daemon.pid)["hwm_mb"]
        return out
    finally:
        if gen is not None:
            gen.finish(grace_s=30.0)
            gen.close()
        daemon.stop()


def breakdown(root: Path, trace: bool) -> dict[str, Any]:
    """`tvbod.bench.memory_probe` in a fresh interpreter on `root`'s state."""
    cmd = [sys.executable, "-m", "tvbod.bench.memory_probe", str(root / "tvbod.yaml")]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}  # as DaemonProcess starts the daemon
    proc = subprocess.run(cmd + (["--trace"] if trace else []), capture_output=True, text=True,
                          cwd=root, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"memory_probe exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


_STAGES = {"interpreter": "interpreter", "imports": "+ imports (numpy, scipy, zmq, tvbod)",
           "restored": "+ every plant restored", "proposals": "+ every plant's next proposal",
           "after_malloc_trim": "after malloc_trim(0)"}


def _probe_lines(probe: dict[str, Any]) -> list[str]:
    lines = []
    if probe["stages_rss_mb"]:
        lines.append("in-process probe (fresh interpreter, the daemon's restore):")
    for key, mb in probe["stages_rss_mb"].items():
        lines.append(f"  {_STAGES.get(key, key):<44} RSS {mb:7.1f} MB")
    m = probe.get("malloc")
    if m:
        lines.append(f"  glibc heaps: {m['in_use_mb']:.1f} MB in use, {m['free_in_heaps_mb']:.1f} "
                     f"MB free inside them, {m['mmapped_mb']:.1f} MB mmapped")
    for kind, k in probe["plants"].items():
        arrays, objs, n = k["numpy_bytes_per_plant"], k["python_bytes_per_plant"], k["dataset_size"]
        lines.append(f"  {kind} ({k['plants']} plants, n = {n[0]}..{n[1]}): numpy "
                     f"{sum(arrays.values()) / 1024:.0f} KB/plant, Python objects "
                     f"{sum(objs.values()) / 1024:.0f} KB/plant")
        lines += [f"    {path:<40} {b / 1024:9.1f} KB" for path, b in list(arrays.items())[:6]]
        lines += [f"    {path + ' (objects)':<40} {b / 1024:9.1f} KB"
                  for path, b in list(objs.items())[:4]]
    return lines


def _daemon_lines(d: dict[str, Any]) -> list[str]:
    lines = []
    if "ready" in d:
        lines.append(f"daemon: READY in {d['ready_s']:.1f} s, RSS {d['ready']['rss_mb']:.0f} MB")
    for key in ("step", "steady"):
        if key in d:
            s = d[key]
            what = "one step of every plant" if key == "step" else "steady load"
            flag = "" if s["complete"] else f"  INCOMPLETE: {s['reason']}"
            lines.append(f"daemon after {what} ({s['seconds']:.1f} s): RSS {s['rss_mb']:.0f} MB, "
                         f"peak {s['hwm_mb']:.0f} MB{flag}")
    if not d.get("complete") and d.get("reason"):
        lines.append(f"daemon run INCOMPLETE: {d['reason']}")
    return lines


def format_report(result: dict[str, Any]) -> str:
    lines = [f"memory with {result['plants']} plants"]
    lines += _probe_lines(result.get("breakdown") or {"stages_rss_mb": {}, "plants": {}})
    if "top_allocations" in result:
        lines.append(f"tracemalloc, kept after restore + proposals: {result['traced_mb']:.1f} MB; "
                     "top sites:")
        lines += [f"  {a['mb']:7.2f} MB {a['blocks']:7d} blocks  {a['where']}"
                  for a in result["top_allocations"][:10]]
    if result.get("daemon"):
        lines += _daemon_lines(result["daemon"])
    lines.append(goal_line(result))
    return "\n".join(lines)


def goal_line(result: dict[str, Any]) -> str:
    d = result.get("daemon") or {}
    peak = d.get("peak_mb")
    where = "daemon peak"
    if peak is None:  # --no-daemon: the in-process probe's largest stage
        peak, where = max(result["breakdown"]["stages_rss_mb"].values()), "in-process probe"
    verdict = "met" if peak <= RSS_GOAL_MB else "missed"
    if d and not d.get("complete"):
        verdict += " (incomplete run)"
    return (f"daemon RSS <= {RSS_GOAL_MB:g} MB with {result['plants']} plants: {verdict} "
            f"({peak:.0f} MB, {where})")


def run(args: argparse.Namespace) -> int:
    specs = _specs(args)
    result: dict[str, Any] = {"plants": len(specs), "settings": {
        k: getattr(args, k) for k in ("box_plants", "box_n", "arms_plants", "arms_n", "steady")}}
    with tempfile.TemporaryDirectory(prefix="tvbod-memory-") as tmp:
        root = Path(tmp) if args.workdir is None else args.workdir
        if args.workdir is not None:
            root.mkdir(parents=True)
        if args.seeded is not None:
            _copy_seeded(args.seeded, root)
        else:
            write_daemon_file(root, "ipc://{runtime_dir}/tvbod.sock")
            _write_plants(root, specs, seeding=True)
            _log(f"seeding {len(specs)} plants in-process (refit deferred)")
            result["seed"] = seed(root, specs)
            _log(f"seeded in {result['seed']['seconds']:.1f} s")
        _write_plants(root, specs, seeding=False)
        if not args.no_daemon:
            _log("daemon on the seeded state")
            result["daemon"] = daemon_run(args, root, specs)
        if not args.no_breakdown or args.no_daemon:
            _log("in-process breakdown (a fresh interpreter, twice: RSS, then tracemalloc)")
            result["breakdown"] = breakdown(root, trace=False)
            traced = breakdown(root, trace=True)
            result["traced_mb"], result["top_allocations"] = traced["traced_mb"], \
                traced["top_allocations"]
    print(format_report(result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2, default=str))
    return 0
