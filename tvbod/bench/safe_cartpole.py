"""`tvbod bench safe-cartpole`: the shipped `cartpole-safe` plant file against the same file
without `safety:`, on the project's cart-pole (friction x2.5 at `--jump-at`), side by side on the
same seeds (common random numbers).

A run counts catastrophic episodes (the pole falls: cost >= 100, told as a failed experiment with
safety, as the posterior mean plus 3 sds without), threshold violations (noise-free cost above
the file's `max_cost`, catastrophes included), whether the jump was caught within 5 steps, false
resets (before the jump) and the cumulative regret against the box's best cost.
"""

from __future__ import annotations

import argparse
import json
from multiprocessing import Pool
from pathlib import Path

import numpy as np

WINDOW = 5
FAILURE_SIGMAS = 3.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, help="seeds per row (default 20)")
    parser.add_argument("--horizon", type=int, default=300, help="steps T (default 300)")
    parser.add_argument("--jump-at", type=int, default=100, help="the friction jump's step")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")


def _mapping(seed: int, safe: bool) -> tuple[dict, float]:
    from tvbod.resources import shipped
    from tvbod.service.config import load_plant_config

    config = load_plant_config(shipped("configs/plants/cartpole-safe.yaml"))
    m = dict(config.optimizer_mapping, seed=seed)
    if not safe:
        m.pop("safety")
    return m, config.optimizer.safety.threshold


def run_one(task: tuple[int, bool, int, int]) -> dict:
    """One run: `(seed, safe, horizon, jump_at)` -> its counts and regret."""
    from tvbod.bench.suite import plants as pl
    from tvbod.bench.suite.plant import Drift
    from tvbod.core import make_strategy

    seed, safe, horizon, jump_at = task
    mapping, threshold = _mapping(seed, safe)
    plant, drift = pl.plant("cartpole"), Drift("jump-large", at=jump_at)
    s = make_strategy(mapping)
    out = {"seed": seed, "safety": safe, "catastrophic": 0, "violations": 0, "regret": 0.0,
           "resets": []}
    for t in range(1, horizon + 1):
        x = s.ask()
        y = plant.episode(x, t, drift, np.random.default_rng([seed, t]))
        cost = plant.cost(x, t, drift)
        failed = not y < plant.catastrophic_cost
        out["catastrophic"] += failed
        out["violations"] += bool(failed or cost > threshold)
        out["regret"] += min(cost, plant.catastrophic_cost) - plant.best_cost(t, drift)
        if failed and not safe:
            mean, std = s.predict(x)
            y = mean + FAILURE_SIGMAS * std
        if s.tell(x, y, failed=failed and safe).reset:
            out["resets"].append(t)
    return out


def summary(rows: list[dict], jump_at: int) -> str:
    lines = ["| plant file | runs | catastrophic episodes (runs with one) | violations | "
             f"jump caught <= {WINDOW} steps | false-reset runs | R_T mean +- sd |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for safe in (True, False):
        got = [r for r in rows if r["safety"] == safe]
        if not got:
            continue
        regret = np.array([r["regret"] for r in got])
        caught = sum(any(jump_at <= t <= jump_at + WINDOW for t in r["resets"]) for r in got)
        false = sum(any(t < jump_at for t in r["resets"]) for r in got)
        sd = regret.std(ddof=1) if len(got) > 1 else float("nan")
        lines.append(
            f"| cartpole-safe.yaml{'' if safe else ' without safety:'} | {len(got)} | "
            f"{sum(r['catastrophic'] for r in got)} ({sum(r['catastrophic'] > 0 for r in got)}) | "
            f"{sum(r['violations'] for r in got)} | {caught}/{len(got)} | {false}/{len(got)} | "
            f"{regret.mean():.1f} +- {sd:.1f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    tasks = [(args.seed * 100003 + r, safe, args.horizon, args.jump_at)
             for r in range(args.runs) for safe in (True, False)]
    with Pool(max(1, args.workers)) as pool:
        rows = pool.map(run_one, tasks)
    print(summary(rows, args.jump_at))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    return 0
