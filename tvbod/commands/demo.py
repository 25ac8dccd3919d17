"""`tvbod demo` (what `make demo` runs): the daemon and both demo adapters as real processes.

Starts `tvbod run` with the shipped plant files (written into the run folder, as `tvbod init`
writes them) on a fresh state directory in a run folder (default `./runs/demo-<time>`, from the
current directory; works from an installed wheel as from a checkout), starts the cart-pole adapter
(friction x2.5 at t = 100, T = 300) twice, for `cartpole` and for `cartpole-safe` (a wide gain box
that holds destabilising gains, tuned with `safety:`), and the temperature adapter (Intel Lab
sensors, T = 96) against it, streams their progress, stops the daemon, verifies every plant's
history by offline replay, then prints a summary per plant and writes its report (`tvbod report`:
one HTML page with the measurements, resets, trigger statistics, gains, safe set and events) into
the run folder, printing each page's path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None,
                        help="run folder (default ./runs/demo-<time>)")
    parser.add_argument("--cartpole-steps", type=int, default=300)
    parser.add_argument("--jump-at", type=int, default=100, help="step of the cart-pole's friction jump")
    parser.add_argument("--temperature-steps", type=int, default=96)
    parser.add_argument("--plants", type=Path, default=None,
                        help="folder of plant files (default: the shipped ones, written into the "
                        "run folder's plants/)")
    parser.add_argument("--quiet", action="store_true", help="no per-step progress lines")


def _write_daemon_config(run_dir: Path, plants: Path) -> Path:
    path = run_dir / "tvbod.yaml"
    path.write_text(
        "# written by `tvbod demo`\n"
        'endpoints: ["ipc://{runtime_dir}/tvbod.sock"]\n'
        "runtime_dir: ./run\nstate_dir: ./state\nlog_format: json\n"
        f'plants: "{plants.resolve()}/*.yaml"\n')
    return path


def _stream(proc: subprocess.Popen, quiet: bool, sink: list[str]) -> None:
    for line in proc.stdout:
        sink.append(line)
        if not quiet:
            print(line, end="", flush=True)


def _wait_ready(endpoint: str, daemon: subprocess.Popen, log: Path) -> None:
    from tvbod.client import DaemonClient, DaemonUnavailable

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with DaemonClient(endpoint, "cartpole", timeout_s=0.5, retries=0) as c:
                c.ping()
            return
        except DaemonUnavailable:
            time.sleep(0.1)
    raise SystemExit("the daemon did not answer within 60 s")


def _history(plant_dir: Path) -> list[dict]:
    """The plant's `measurement` events (psi, thresholds, which test fired), one per step."""
    from tvbod.commands.replay import load_history

    try:
        return load_history(plant_dir)
    except OSError:
        return []


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def summarize(name: str, records: list[dict], jump_at: int | None = None,
              history: list[dict] | None = None) -> list[str]:
    """Lines of the per-plant summary: regret, resets and (cart-pole) the jump's detection, with
    the test that fired and its statistic against its threshold (from the plant's events)."""
    if not records:
        return [f"{name}: no steps recorded"]
    regret = [r["regret"] for r in records if r["regret"] is not None]
    resets = [r["t"] for r in records if r["reset"]]
    lines = [f"{name}: {len(records)} steps, cumulative regret {sum(regret):.2f} "
             f"(R_T/T = {sum(regret) / len(records):.4f}), {len(resets)} reset(s)"
             + (f" at t = {resets}" if len(resets) <= 20 else
                f", first at t = {resets[:20]} ...")]
    failed = sum(r["failed"] for r in records)
    if failed:
        lines.append(f"{name}: {failed} failed experiment(s)")
    safe = [h for h in history or [] if h.get("safe_fraction") is not None]
    if safe:
        violations = [h["t"] for h in safe if h.get("safety_violation")]
        lines.append(f"{name}: safety: {len(violations)} threshold violation(s)"
                     + (f" at t = {violations[:10]}" if violations else "")
                     + f"; the safe set covers {100 * safe[-1]['safe_fraction']:.1f} % of the box "
                     f"at the end (largest {100 * max(h['safe_fraction'] for h in safe):.1f} %)")
    if jump_at is not None:
        before = [t for t in resets if t < jump_at]
        after = [t for t in resets if t >= jump_at]
        lines.append(f"{name}: friction jump at t = {jump_at}: "
                     + (f"first reset at t = {after[0]} (delay {after[0] - jump_at} step(s))"
                        + _detection(history or [], after[0]) if after else
                        "no reset after the jump")
                     + f"; {len(before)} reset(s) before it")
    return lines


def _detection(history: list[dict], t: int) -> str:
    """`", window test: |sum e| 1.21 > 0.98 (w = 2)"` for the reset at step t, if recorded."""
    e = next((h for h in history if h["t"] == t), None)
    if e is None:
        return ""
    if e.get("test") == "window":
        return (f", window test: |sum e| {e['window_psi']:.3f} > {e['window_threshold']:.3f} "
                f"(w = {e['window']})")
    return f", point test: psi {e['psi']:.3f} > threshold {e['threshold']:.3f}"


def run(args: argparse.Namespace) -> int:
    from tvbod.commands.report import plant_configs, write_report

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = (args.out or Path.cwd() / "runs" / f"demo-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    plants = args.plants
    if plants is None:
        from tvbod.commands.init import plant_tree

        plants = run_dir / "plants"
        plants.mkdir(exist_ok=True)
        for name, data in plant_tree().items():
            (plants / name).write_bytes(data)
    config = _write_daemon_config(run_dir, plants)
    endpoint = f"ipc://{run_dir}/run/tvbod.sock"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log = run_dir / "daemon.log"
    start = time.monotonic()
    print(f"tvbod demo: run folder {run_dir}", flush=True)
    with open(log, "wb") as out:
        daemon = subprocess.Popen([sys.executable, "-m", "tvbod", "run", "--config", str(config)],
                                  stdout=out, stderr=subprocess.STDOUT, env=env, cwd=run_dir)
    try:
        _wait_ready(endpoint, daemon, log)
        print(f"tvbod demo: daemon pid {daemon.pid} serving {endpoint}", flush=True)
        adapters = {
            "cartpole": [sys.executable, "-m", "plant_adapters.cartpole", "--endpoint", endpoint,
                         "--until", str(args.cartpole_steps), "--jump-at", str(args.jump_at),
                         "--out", str(run_dir / "cartpole.jsonl")],
            "cartpole-safe": [sys.executable, "-m", "plant_adapters.cartpole", "--endpoint",
                              endpoint, "--plant", "cartpole-safe", "--until",
                              str(args.cartpole_steps), "--jump-at", str(args.jump_at),
                              "--out", str(run_dir / "cartpole-safe.jsonl")],
            "temperature": [sys.executable, "-m", "plant_adapters.temperature", "--endpoint",
                            endpoint, "--until", str(args.temperature_steps),
                            "--out", str(run_dir / "temperature.jsonl")],
        }
        procs, threads, outputs = {}, [], {}
        for name, cmd in adapters.items():
            procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, env=env, cwd=run_dir)
            outputs[name] = []
            th = threading.Thread(target=_stream, args=(procs[name], args.quiet, outputs[name]))
            th.start()
            threads.append(th)
        codes = {name: p.wait() for name, p in procs.items()}
        for th in threads:
            th.join()
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        daemon_code = daemon.wait(60)
    print(f"\ntvbod demo: daemon stopped with exit code {daemon_code}; "
          f"adapters: {', '.join(f'{k} {v}' for k, v in codes.items())}", flush=True)
    for name, code in codes.items():
        if code != 0:
            print("".join(outputs[name][-20:]))
    verdicts = {}
    for name in adapters:
        rep = subprocess.run([sys.executable, "-m", "tvbod", "replay",
                              str(run_dir / "state" / "plants" / name)],
                             capture_output=True, text=True, env=env)
        verdicts[name] = rep.stdout.strip() or rep.stderr.strip()
    print("\n=== summary ===")
    jumps = {"cartpole": args.jump_at, "cartpole-safe": args.jump_at, "temperature": None}
    configs = plant_configs(str(config))
    for name in adapters:
        records = _records(run_dir / f"{name}.jsonl")
        history = _history(run_dir / "state" / "plants" / name)
        jump = jumps[name] if jumps[name] and args.cartpole_steps >= jumps[name] else None
        for line in summarize(name, records, jump, history):
            print(line)
        print(f"{name}: replay: {verdicts[name]}")
        page = write_report(run_dir / "state" / "plants" / name, run_dir / f"{name}.html",
                            configs.get(name))
        print(f"{name}: report {page}")
    print(f"state, events and logs: {run_dir}  ({time.monotonic() - start:.0f} s)")
    ok = daemon_code == 0 and all(c == 0 for c in codes.values())
    return 0 if ok else 1
