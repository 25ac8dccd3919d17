"""`tvbod demo` (what `make demo` runs): the daemon and both demo adapters as real processes.

Starts `tvbod run` with the shipped plant files (written into the run folder, as `tvbod init`
writes them) on a fresh state directory in a run folder (default `./runs/demo-<time>`, from the
current directory; works from an installed wheel as from a checkout), starts the cart-pole adapter (friction x2.5 at t = 100, T = 300) and the
temperature adapter (Intel Lab sensors, T = 96) against it, streams their progress, stops the
daemon, verifies both plants' histories by offline replay, then prints a summary per plant and
writes PNG plots (measurement, regret, gains, resets) into the run folder.
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
    from plant_adapters.client import DaemonClient, DaemonUnavailable

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


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def summarize(name: str, records: list[dict], jump_at: int | None = None) -> list[str]:
    """Lines of the per-plant summary: regret, resets and (cart-pole) the jump's detection."""
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
    if jump_at is not None:
        before = [t for t in resets if t < jump_at]
        after = [t for t in resets if t >= jump_at]
        lines.append(f"{name}: friction jump at t = {jump_at}: "
                     + (f"first reset at t = {after[0]} (delay {after[0] - jump_at} step(s))"
                        if after else "no reset after the jump")
                     + f"; {len(before)} reset(s) before it")
    return lines


def plot(run_dir: Path, name: str, records: list[dict], jump_at: int | None) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t = np.array([r["t"] for r in records])
    y = np.array([np.nan if r["measurement"] is None else r["measurement"] for r in records])
    reg = np.array([np.nan if r["regret"] is None else r["regret"] for r in records])
    cum = np.nancumsum(reg)
    fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax[0].plot(t, y, ".", ms=3)
    ax[0].set_ylabel("measurement")
    ax[1].plot(t, cum / t, label="R_t / t")
    ax[1].set_ylabel("normalized regret")
    names = list(records[0]["gains"])
    G = np.array([[r["gains"][k] for k in names] for r in records], dtype=float)
    span = np.where(np.ptp(G, axis=0) > 0, np.ptp(G, axis=0), 1.0)
    for j, k in enumerate(names):
        ax[2].plot(t, (G[:, j] - G[:, j].min()) / span[j], lw=0.8, label=k)
    ax[2].set_ylabel("gains (min-max over the run)" if len(names) > 1 else "arm (min-max)")
    ax[2].set_xlabel("step t")
    ax[2].legend(fontsize=7, ncol=4)
    for r in records:
        if r["reset"]:
            for a in ax:
                a.axvline(r["t"], color="tab:red", lw=0.6, alpha=0.6)
    if jump_at is not None:
        for a in ax:
            a.axvline(jump_at, color="k", ls="--", lw=0.8)
    ax[0].set_title(f"{name}: resets in red" + (", friction jump dashed" if jump_at else ""))
    fig.tight_layout()
    path = run_dir / f"{name}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = (args.out or Path.cwd() / "runs" / f"demo-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    plants = args.plants
    if plants is None:
        from tvbod.service.init_cmd import plant_tree

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
                         "--steps", str(args.cartpole_steps), "--jump-at", str(args.jump_at),
                         "--out", str(run_dir / "cartpole.jsonl")],
            "temperature": [sys.executable, "-m", "plant_adapters.temperature", "--endpoint",
                            endpoint, "--steps", str(args.temperature_steps),
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
    jumps = {"cartpole": args.jump_at, "temperature": None}
    for name in adapters:
        records = _records(run_dir / f"{name}.jsonl")
        jump = jumps[name] if jumps[name] and args.cartpole_steps >= jumps[name] else None
        for line in summarize(name, records, jump):
            print(line)
        print(f"{name}: replay: {verdicts[name]}")
        png = plot(run_dir, name, records, jump) if records else None
        if png:
            print(f"{name}: plot {png}")
    print(f"state, events and logs: {run_dir}  ({time.monotonic() - start:.0f} s)")
    ok = daemon_code == 0 and all(c == 0 for c in codes.values())
    return 0 if ok else 1
