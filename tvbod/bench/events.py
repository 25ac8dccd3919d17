"""`tvbod bench events`: plant events per second through the daemon's event path.

`PlantEventLog.emit` as the daemon calls it for each step: a `proposal` and a `measurement` event
with the fields tvbod/service/transition.py gives them (4 gains, the trigger's numbers), JSON on
a stdout stream (here /dev/null) and appended to a real `events.jsonl` in a temporary directory.
Measured at `log_level: info` (the per-step events reach only the file) and `debug` (both),
`--repeats` times each; the best run is reported (the least disturbed by other load). A tenth of
the measurements carry a NaN (`psi` of a reset step) so the non-finite path is timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20000, help="events per run (20000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per level; the best counts (3)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _fields(i: int) -> tuple[dict, dict]:
    gains = {"k_x": -2.5 + 1e-4 * i, "k_v": -4.1, "k_theta": 31.7, "k_omega": 2.25}
    proposal = {"t": i, "proposal_id": f"p{i:08d}", "gains": gains}
    measurement = {
        "t": i, "proposal_id": f"p{i:08d}", "x": list(gains.values()), "gains": gains,
        "measurement": 0.731 + 1e-5 * i, "failed": False, "raw_measurement": 12.5 + 1e-3 * i,
        "psi": float("nan") if i % 10 == 0 else 0.42, "threshold": 0.878, "mu": 0.7,
        "sigma": 0.05, "reset": False, "t_prime": 1, "dataset_size": min(i, 300), "metadata": None,
    }
    return proposal, measurement


def measure(n: int, level: str, directory: Path) -> float:
    """Events per second for `n` events (half proposals, half measurements) at `level`."""
    from tvbod.service.events import PlantEventLog, configure_logging

    with open(os.devnull, "w") as stdout:
        configure_logging("json", stream=stdout, level=level, priority_prefix=False)
        log = PlantEventLog(directory / f"events-{level}.jsonl", plant="cartpole")
        steps = [_fields(i) for i in range(n // 2)]
        start = time.perf_counter()
        for proposal, measurement in steps:
            log.emit("proposal", **proposal)
            log.emit("measurement", **measurement)
        elapsed = time.perf_counter() - start
        log.close()
    return 2 * len(steps) / elapsed


def run(args: argparse.Namespace) -> int:
    results = {}
    with tempfile.TemporaryDirectory(prefix="tvbod-bench-events-") as tmp:
        for level in ("info", "debug"):
            rates = []
            for r in range(max(1, args.repeats)):
                run_dir = Path(tmp) / f"{level}-{r}"
                run_dir.mkdir()
                rates.append(measure(args.events, level, run_dir))
            lines = (run_dir / f"events-{level}.jsonl").read_text().count("\n")
            results[level] = {"events_per_s": max(rates), "runs": rates, "file_lines": lines}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"plant events through PlantEventLog.emit ({args.events} per run, best of "
          f"{max(1, args.repeats)})")
    print("log_level  events/s  stdout")
    for level, r in results.items():
        print(f"{level:<9}  {r['events_per_s']:8.0f}  {'every event' if level == 'debug' else 'none'}")
    return 0
