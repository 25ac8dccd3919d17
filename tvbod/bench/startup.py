"""`tvbod bench startup`: time from `tvbod run` to READY, with real processes, and import times.

Each start is a fresh `python -m tvbod run` on an empty state directory, timed from the spawn to
the `READY=1` datagram on its `$NOTIFY_SOCKET` (sent once every plant file is loaded and validated,
every plant restored and the socket bound: tvbod/commands/run.py), then stopped with SIGTERM.
Cases:

- `shipped`: the tree `tvbod init` writes (the cart-pole and temperature plants);
- `inline`: `--plants` arms plants, each a 50-arm plant file with its 50 x 50 matrix kernel inline
  (17 significant digits, ~58 KB per file);
- `side-file`: the same plants with the matrix in a `.npy` beside each plant file.

Imports: `python -X importtime -c 'import M'`, the cumulative time of `M` as the interpreter
reports it, for `tvbod.core` (what the core's package costs) and `tvbod.core.strategies` (what a
strategy costs: scipy's linear algebra and optimizer). `--source DIR` times another checkout's
code (its directory is put first on PYTHONPATH), e.g. the state before a change; a case that
checkout cannot run (no side files) is reported as failed, and nothing is left running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = ("shipped", "inline", "side-file")
ARMS = 50
#: A finite-domain plant file (the tests' harness writes its arms plants from it too).
PLANT = """\
name: {name}
parameters:
  - {{name: arm, arms: {arms}}}
sense: maximize
optimizer:
  strategy: et-gp-ucb
  noise_variance: {noise}
  seed: {seed}
  kernel:
    type: matrix
    matrix: {matrix}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plants", type=int, default=100, help="plant files of the inline and "
                        "side-file cases (100)")
    parser.add_argument("--repeats", type=int, default=3, help="starts per case (3)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {CASES}")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a start may take before it counts as failed (600)")
    parser.add_argument("--source", type=Path, default=None,
                        help="time the code of this checkout instead (put first on PYTHONPATH)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _env(source: Path | None, root: Path) -> dict[str, str]:
    env = dict(os.environ, XDG_RUNTIME_DIR=str(root / "run"), XDG_STATE_HOME=str(root / "state"),
               HOME=str(root), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("TVBOD_CONFIG", None)
    env.pop("NOTIFY_SOCKET", None)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    return env


def matrix_kernel(seed: int, arms: int = ARMS):
    """A positive definite `(arms, arms)` covariance (an empirical one of random samples)."""
    import numpy as np

    samples = np.random.default_rng(seed).standard_normal((arms, 2 * arms))
    K = np.cov(samples) + 1e-6 * np.eye(arms)
    return (K + K.T) / 2


def write_arms_tree(root: Path, plants: int, side_file: bool) -> Path:
    """`root/tvbod.yaml` and `plants` arms plant files (inline matrices, or `.npy` side files)."""
    import numpy as np

    (root / "plants").mkdir(parents=True)
    for i in range(plants):
        K = matrix_kernel(i)
        name = f"arms{i:03d}"
        if side_file:
            np.save(root / "plants" / f"{name}.npy", K)
            matrix = f"{name}.npy"
        else:
            rows = "\n".join("      - [" + ", ".join(repr(float(v)) for v in row) + "]" for row in K)
            matrix = "\n" + rows
        (root / "plants" / f"{name}.yaml").write_text(
            PLANT.format(name=name, arms=ARMS, noise="0.01", seed=i, matrix=matrix))
    (root / "tvbod.yaml").write_text("plants: plants/*.yaml\n")
    return root / "tvbod.yaml"


def time_to_ready(config: Path, env: dict[str, str], root: Path, timeout: float) -> dict:
    """Spawn `tvbod run --config config`; seconds until READY=1 (None if it never came)."""
    address = str(root / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        sock.settimeout(0.2)
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "tvbod", "run", "--config", str(config),
                                 "--log-format", "json"], env=dict(env, NOTIFY_SOCKET=address),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ready = None
        try:
            while ready is None and proc.poll() is None and time.perf_counter() - start < timeout:
                try:
                    if b"READY=1" in sock.recv(4096).split(b"\n"):
                        ready = time.perf_counter() - start
                except socket.timeout:
                    continue
        finally:
            _stop(proc)
    error = None if ready is not None else (proc.stderr.read().decode(errors="replace")[-400:]
                                            or f"no READY within {timeout:g} s")
    proc.stderr.close()
    return {"ready_s": ready, "error": error}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def import_ms(module: str, env: dict[str, str]) -> float | None:
    """Cumulative import time of `module` in a fresh interpreter (`-X importtime`), ms."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    for line in reversed(proc.stderr.splitlines()):
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1]) / 1000
    return None


def run_case(case: str, args: argparse.Namespace, work: Path, k: int) -> dict:
    root = work / f"{case}-{k}"
    env = _env(args.source, root)
    if case == "shipped":
        init = subprocess.run([sys.executable, "-m", "tvbod", "init", str(root / "site")], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        if init.returncode != 0:
            return {"ready_s": None, "error": init.stderr[-400:]}
        config = root / "site" / "tvbod.yaml"
    else:
        config = write_arms_tree(root / "site", args.plants, side_file=case == "side-file")
    result = time_to_ready(config, env, root, args.timeout)
    result["plant_bytes"] = sum(p.stat().st_size for p in (root / "site" / "plants").rglob("*.yaml"))
    return result


def measure(args: argparse.Namespace) -> dict:
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"tvbod bench startup: unknown cases {unknown} (of {list(CASES)})")
    out: dict = {"cases": {}, "imports_ms": {}}
    with tempfile.TemporaryDirectory(prefix="tvbod-startup-") as tmp:
        for case in cases:
            runs = []
            for k in range(max(1, args.repeats)):
                runs.append(run_case(case, args, Path(tmp), k))
                print(f"[startup] {case} {k + 1}/{max(1, args.repeats)}: "
                      f"{_seconds(runs[-1]['ready_s'])}", file=sys.stderr, flush=True)
            times = [r["ready_s"] for r in runs if r["ready_s"] is not None]
            out["cases"][case] = {
                "plants": 2 if case == "shipped" else args.plants, "runs": runs,
                "median_s": statistics.median(times) if times else None,
                "min_s": min(times) if times else None,
                "plant_bytes": runs[0]["plant_bytes"] if "plant_bytes" in runs[0] else None}
        env = _env(args.source, Path(tmp))
        for module in ("tvbod.core", "tvbod.core.strategies"):
            out["imports_ms"][module] = import_ms(module, env)
    return out


def _seconds(v: float | None) -> str:
    return "failed" if v is None else f"{v:.2f} s"


def run(args: argparse.Namespace) -> int:
    results = measure(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"time to READY (`tvbod run`, fresh state), {max(1, args.repeats)} starts per case")
        print("case        plants  plant files  median   min      failed")
        for case, r in results["cases"].items():
            failed = sum(x["ready_s"] is None for x in r["runs"])
            print(f"{case:<10}  {r['plants']:>6}  {r['plant_bytes'] / 1e3:>8.0f} KB  "
                  f"{_seconds(r['median_s']):>7}  {_seconds(r['min_s']):>7}  {failed}")
        for module, ms in results["imports_ms"].items():
            print(f"import {module}: " + ("failed" if ms is None else f"{ms:.0f} ms (-X importtime)"))
    failures = [x["error"] for r in results["cases"].values() for x in r["runs"] if x["error"]]
    for e in failures[:1]:
        print(f"first failure: {e.strip()}", file=sys.stderr)
    return 1 if failures else 0
