"""`tvbod bench suite`: plants x drift kinds x rows x runs on the sweep executor, one
`results.json` and markdown tables, dev and held-out apart.

A task is one (plant, drift kind, row, run). The run's seed (from `--seed` and the run) fixes the
plant's realisation and the episode noise `default_rng([seed, t])`, shared by every row (common
random numbers), and seeds the optimizer. A catastrophic episode (cost at or above the plant's
`catastrophic_cost`) is told as the posterior mean plus 3 standard deviations on the worse side
(the daemon's default failure policy; a row with `safety:` tells it as a failed experiment) and
its regret counts the capped cost. Every run on a box plant also counts its threshold violations:
episodes whose noise-free cost exceeds the safe rows' threshold (`algorithms.threshold_of`), for
every row alike. The change happens
at a third of the horizon (`two-jumps`: also at two thirds); a ramp or a period lasts a third.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import plant_runs as pr
from .. import sweep
from . import algorithms as al
from . import plants as pl
from . import report
from .plant import DRIFT_KINDS, Drift

FAILURE_SIGMAS = 3.0
#: `--quick`: a tiny grid (one dev and one held-out plant), cheap budgets.
QUICK = {"plants": ("hartmann3", "ackley4"), "drifts": ("none", "optimum-jump"),
         "algorithms": ("et-shipped", "gp-ucb"), "runs": 2, "horizon": 30}
DEFAULTS = {"drifts": DRIFT_KINDS, "algorithms": tuple(n for n in al.NAMES if n != "oracle"),
            "runs": 30, "horizon": 300}


@dataclass(frozen=True)
class Config:
    horizon: int
    budget: al.Budget


def drift_for(kind: str, horizon: int) -> Drift:
    third = max(1, horizon // 3)
    return Drift(kind, at=third + 1, second=2 * third + 1, ramp_steps=third, period=third)


def run_task(name: str, kind: str, algo: pr.Algo, run: int, seed: int, cfg: Config) -> dict:
    """One row on one run of one plant and drift for `cfg.horizon` steps. `cpu_s` is the
    optimizer's CPU time (its asks and tells), not the plant's."""
    rs = pr.run_seed(seed, run)
    plant = pl.plant(name)
    plant = plant.for_run(rs) if hasattr(plant, "for_run") else plant
    drift = drift_for(kind, cfg.horizon)
    bests = [plant.best_cost(t, drift) for t in range(1, cfg.horizon + 1)]
    if algo.strategy == "wdbo":
        return _wdbo(plant, drift, algo, run, rs, cfg, bests)
    from tvbod.core import make_strategy

    mapping = al.spec(plant, algo, rs, cfg.horizon, cfg.budget)
    sign = -1.0 if mapping.get("sense") == "maximize" else 1.0  # told: the cost, or -cost
    cpu, mark = 0.0, time.process_time()
    strategy = make_strategy(mapping)
    regret, resets, catastrophic, optimum = [], [], 0, sum(bests)
    safe, threshold, violations = "safety" in mapping, al.threshold_of(algo, plant), 0
    path = hashlib.sha256()
    for t, best in enumerate(bests, start=1):
        x = strategy.ask()
        cpu += time.process_time() - mark
        path.update(np.round(np.asarray(x, float), 9).tobytes())
        y = plant.episode(x, t, drift, np.random.default_rng([rs, t]))
        failed = not y < plant.catastrophic_cost
        if failed:
            catastrophic += 1
            mean, std = strategy.predict(x)
            told = mean + sign * FAILURE_SIGMAS * std
            regret.append(plant.catastrophic_cost - best)
        else:
            told = sign * y
            regret.append(min(plant.cost(x, t, drift), plant.catastrophic_cost) - best)
        if threshold is not None:
            violations += bool(failed or plant.cost(x, t, drift) > threshold)
        mark = time.process_time()
        if strategy.tell(x, told, failed=failed and safe).reset:
            resets.append(t)
    return {"plant": name, "drift": kind, "run": run, "label": algo.label, "regret": regret,
            "reset_times": resets, "catastrophic": catastrophic,
            "violations": None if threshold is None else violations,
            "trajectory": path.hexdigest()[:16],
            "realisation": {"plant_seed": rs, "optimum_sum": round(optimum, 9)},
            "cpu_s": cpu + time.process_time() - mark}


def _wdbo(plant, drift, algo, run, rs, cfg, bests) -> dict:
    """W-DBO on a box plant, accounted as the other rows (it maximizes: told -cost); its CPU
    time includes the plant's."""
    from .. import wdbo

    t_start = time.process_time()
    regret, catastrophic, optimum = [], 0, sum(bests)
    path = hashlib.sha256()
    with wdbo.seeded(rs):
        wd = wdbo.Session(plant.lower, plant.upper, float(cfg.horizon))
        for t, best in enumerate(bests, start=1):
            x = wd.ask(t)
            path.update(np.round(x, 9).tobytes())
            y = plant.episode(x, t, drift, np.random.default_rng([rs, t]))
            if not y < plant.catastrophic_cost:
                catastrophic += 1
                pred = wd.predict(x, t)
                worse = None if pred is None else pred[0] - FAILURE_SIGMAS * pred[1]
                y = plant.catastrophic_cost if worse is None else -worse
            regret.append(min(plant.cost(x, t, drift), plant.catastrophic_cost) - best)
            wd.tell(x, t, -y)
    return {"plant": plant.name, "drift": drift.kind, "run": run, "label": algo.label,
            "regret": regret, "reset_times": [], "removal_times": wd.removal_times,
            "catastrophic": catastrophic, "trajectory": path.hexdigest()[:16],
            "realisation": {"plant_seed": rs, "optimum_sum": round(optimum, 9)},
            "cpu_s": time.process_time() - t_start}


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plants", type=lambda s: sweep.comma_list(s, pl.names(), "plant"),
                        default=None, help="comma list of plants (default: all of --split)")
    parser.add_argument("--drifts", type=lambda s: sweep.comma_list(s, DRIFT_KINDS, "drift"),
                        default=None, help="comma list of drift kinds (default all a plant has)")
    parser.add_argument("--algorithms", type=lambda s: sweep.comma_list(s, al.NAMES, "algorithm"),
                        default=None, help=f"comma list of rows from {', '.join(al.NAMES)} "
                                           "(default all but oracle)")
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (default 30)")
    parser.add_argument("--horizon", type=int, default=None, help="steps T (default 300)")
    parser.add_argument("--split", choices=("dev", "held-out", "all"), default="dev",
                        help="which plants (default dev; held-out cells run once per release)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny grid: 2 plants, 2 drifts, 2 rows, 2 runs, T = 30, cheap "
                             "budgets")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/suite"),
                        help="directory for runs.jsonl, results.json and tables.md")
    sweep.add_arguments(parser)


def _choices(args) -> dict:
    base = QUICK if args.quick else DEFAULTS
    given = {k: getattr(args, k) for k in ("plants", "drifts", "algorithms", "runs", "horizon")}
    c = {k: v if v is not None else base.get(k) for k, v in given.items()}
    split = "all" if args.quick else args.split
    if c["plants"] is None:
        c["plants"] = tuple(n for n in pl.names() if split == "all" or pl.split_of(n) == split)
    return c


def run(args: argparse.Namespace) -> int:
    c = _choices(args)
    if c["runs"] < 1 or c["horizon"] < 3 or args.workers < 1:
        print("--runs and --workers must be >= 1 and --horizon >= 3", file=sys.stderr)
        return 2
    cfg = Config(c["horizon"], al.QUICK if args.quick else al.Budget())
    rows = al.rows(c["algorithms"], c["horizon"])
    cells = [(n, k) for n in c["plants"] for k in c["drifts"] if k in pl.plant(n).drifts]
    if not cells or not rows:
        print("nothing to run: no plant has the chosen drift kinds, or no row is available",
              file=sys.stderr)
        return 2
    print("Plants and their split (tvbod.bench.suite.plants.SPLIT):")
    print(pl.format_split(pl.split_table()))
    tasks = [sweep.task(run_task, n, k, a, r, args.seed, cfg, seed=pr.run_seed(args.seed, r),
                        rank=pr.cost_rank(a))
             for n, k in cells for a, _ in rows if al.applies(a, pl.plant(n))
             for r in range(c["runs"])]
    outcome = sweep.run(tasks, args, "suite")
    if outcome.failures:
        return 1
    doc = summarize(outcome.ordered(tasks), cells, rows, c, args.seed)
    doc["wall_time_s"] = round(outcome.wall_s, 2)
    text = "\n\n".join(f"### {s}\n\n{doc['tables'][s]}" for s in ("dev", "held-out"))
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tables.md").write_text(text + "\n")
    args.no_plots = True
    return sweep.finish(args, outcome, doc, lambda: [])


def summarize(results: list[dict], cells, rows, c: dict, seed: int) -> dict:
    """results.json: the configuration, the split table, every cell's statistics, the tables."""
    by: dict = {}
    for r in results:
        by.setdefault((r["plant"], r["drift"], r["label"]), []).append(r)
    out = []
    for n, k in cells:
        p = pl.plant(n)
        for a, role in rows:
            got = by.get((n, k, a.label))
            if got:
                out.append(report.cell(n, drift_for(k, c["horizon"]), a, role, got, c["horizon"],
                                       getattr(p, "drift_start", drift_for(k, c["horizon"]).at)))
    tables = {s: report.table([x for x in out if pl.split_of(x["plant"]) == s], s, c["runs"],
                              c["horizon"]) for s in ("dev", "held-out")}
    return {"config": {**{k: list(v) if isinstance(v, tuple) else v for k, v in c.items()},
                       "seed": seed},
            "split": [dict(zip(("plant", "split", "gains", "drifts"), r))
                      for r in pl.split_table()],
            "cells": out, "tables": tables}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tvbod bench suite")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())


