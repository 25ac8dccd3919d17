"""`tvbod bench stopping-time`: the ET-GP-UCB paper's Monte Carlo study of the trigger's stopping
time (Brunzema et al., arXiv 2208.10790: 30,000 i.i.d. runs per eps "on a compute cluster").

Objectives are the within-model benchmark's (`tvbod.bench.within_model`, the same generator and
seeds): Bogunovic et al.'s time-varying GP on a 50 x 50 grid over `[0, 1]^2`, SE lengthscale 0.2,
noise variance 0.02, `beta_t = 0.4 ln(4t)`, `delta_B = 0.1`, here `T = 200` and eps in
{0.03, 0.1}. The stopping time is `tau = min {t' : the trigger fires}`, the first reset of
ET-GP-UCB from an empty dataset; a run stops there (runs with no activation by `T` are counted).
Each run draws one objective and runs both triggers on it: the paper's (`trigger: paper`, Alg. 1)
and the robust default (`trigger: robust`). Beside the distribution of `tau` stands R-GP-UCB's
constant reset period `N = ceil(min(T, 12 eps^(-1/4)))`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from . import sweep
from . import within_model as wm

EPSILONS = (0.03, 0.1)
HORIZON = 200
RUNS = 30_000
#: trigger name -> the within-model benchmark's ET-GP-UCB with that trigger
TRIGGERS = {"paper": wm.PAPER_ET_ALGO, "robust": wm.ROBUST_ET_ALGO}
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def reset_period(eps: float, horizon: int = HORIZON) -> int:
    """R-GP-UCB's constant `N = ceil(min(T, 12 eps^(-1/4)))`."""
    return math.ceil(min(horizon, 12.0 * eps ** -0.25))


def first_activation(algo: wm.Algo, F: np.ndarray, noise: np.ndarray, seed: int,
                     grid: int) -> int | None:
    """The first step `t` (1-based) at which `algo`'s trigger resets on the draw `F`; None if it
    never fires within `len(F)` steps. Stops at the activation."""
    from tvbod.core import make_strategy

    strategy = make_strategy(replace(wm._base_spec(algo, grid), seed=seed))
    for t in range(len(F)):
        x = strategy.ask()
        i = wm.grid_index(x, grid)
        if strategy.tell(x, float(F[t, i] + noise[t])).reset:
            return t + 1
    return None


def run_task(eps: float, run: int, seed: int, horizon: int, grid: int) -> dict:
    """One within-model draw at `eps` (run `run`'s seed) and the stopping time of each trigger."""
    rs = wm.run_seed(seed, run)
    F = wm.sample_functions(wm.sampler_factor(grid), eps, horizon, np.random.default_rng([rs, 0]))
    noise = math.sqrt(wm.NOISE_VARIANCE) * np.random.default_rng([rs, 1]).standard_normal(horizon)
    return {"eps": eps, "run": run,
            "tau": {name: first_activation(algo, F, noise, rs, grid)
                    for name, algo in TRIGGERS.items()}}


def summarize(results: list[dict], epsilons: tuple[float, ...], horizon: int) -> list[dict]:
    """Per (trigger, eps): the stopping times, their histogram (`counts[t - 1]` runs stopped at
    `t`), mean, median and quantiles over the runs that activated, and R-GP-UCB's `N`."""
    out = []
    for name in TRIGGERS:
        for eps in epsilons:
            taus = [r["tau"][name] for r in results if r["eps"] == eps]
            hit = np.array([t for t in taus if t is not None], dtype=float)
            n = reset_period(eps, horizon)
            stats = {"mean": float(hit.mean()), "std": float(hit.std()),
                     "median": float(np.median(hit)),
                     "quantiles": {f"{q:g}": float(np.quantile(hit, q)) for q in QUANTILES},
                     "min": int(hit.min()), "max": int(hit.max()),
                     "share_before_N": float(np.mean(hit < n))} if hit.size else {}
            out.append({"trigger": name, "eps": eps, "runs": len(taus), "N": n,
                        "activated": int(hit.size), "no_activation": len(taus) - int(hit.size),
                        **stats,
                        "counts": np.bincount(hit.astype(int) - 1, minlength=horizon).tolist()
                        if hit.size else [0] * horizon,
                        "taus": taus})
    return out


def format_table(summary: list[dict], horizon: int) -> str:
    lines = [f"| trigger | eps | runs | no activation by T = {horizon} | tau mean +- std | median "
             "| 5 / 25 / 75 / 95 % | R-GP-UCB N | runs with tau < N |", "|" + " --- |" * 9]
    for s in summary:
        if not s["activated"]:
            lines.append(f"| {s['trigger']} | {s['eps']:g} | {s['runs']} | {s['no_activation']} "
                         f"| - | - | - | {s['N']} | - |")
            continue
        q = s["quantiles"]
        lines.append(f"| {s['trigger']} | {s['eps']:g} | {s['runs']} | {s['no_activation']} | "
                     f"{s['mean']:.1f} +- {s['std']:.1f} | {s['median']:g} | "
                     f"{q['0.05']:g} / {q['0.25']:g} / {q['0.75']:g} / {q['0.95']:g} | "
                     f"{s['N']} | {s['share_before_N']:.0%} |")
    return "\n".join(lines)


def figure(summary: list[dict], horizon: int, out: Path) -> Path:
    """`stopping-time.png`: per eps, the histogram of tau of each trigger, N as a vertical line."""
    from . import plots

    epsilons = list(dict.fromkeys(s["eps"] for s in summary))
    fig, axes = plots.panel_grid(len(epsilons), ncols=2, size=(5.0, 3.6))
    for ax, eps in zip(axes, epsilons):
        for s in (s for s in summary if s["eps"] == eps):
            ax.stairs(s["counts"], np.arange(0.5, horizon + 1), fill=True, alpha=0.45,
                      label=f"{s['trigger']} trigger (median {s.get('median', float('nan')):g}, "
                            f"{s['no_activation']} never)")
        n = summary[[s["eps"] for s in summary].index(eps)]["N"]
        ax.axvline(n, color="k", ls="--", lw=1.0, label=f"R-GP-UCB N = {n}")
        ax.set(title=f"eps = {eps:g}: stopping time, {summary[0]['runs']} runs",
               xlabel="tau (first activation)", ylabel="runs", xlim=(0, horizon))
        ax.legend(fontsize=7)
    return plots.save(fig, out / "stopping-time.png")


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per eps (default {RUNS:,})")
    parser.add_argument("--eps", type=_parse_eps, default=EPSILONS,
                        help="comma list of eps (default 0.03,0.1)")
    parser.add_argument("--horizon", type=int, default=HORIZON, help=f"steps T (default {HORIZON})")
    parser.add_argument("--grid", type=int, default=wm.GRID,
                        help=f"grid points per axis (default {wm.GRID}; less for tests)")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/stopping-time"),
                        help="directory for runs.jsonl, results.json and stopping-time.png")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    sweep.add_arguments(parser)


def _parse_eps(text: str) -> tuple[float, ...]:
    try:
        values = tuple(dict.fromkeys(float(v) for v in text.split(",") if v.strip()))
    except ValueError:
        values = ()
    if not values or not all(0.0 < v < 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"--eps wants a comma list of values in (0, 1), got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.workers < 1 or args.horizon < 2 or args.grid < 2:
        print("--runs and --workers must be >= 1, --horizon and --grid >= 2", file=sys.stderr)
        return 2
    tasks = [sweep.task(run_task, eps, r, args.seed, args.horizon, args.grid,
                        seed=wm.run_seed(args.seed, r))
             for r in range(args.runs) for eps in args.eps]
    outcome = sweep.run(tasks, args, "stopping-time")
    if outcome.failures:
        return 1
    summary = summarize(outcome.ordered(tasks), args.eps, args.horizon)
    print(f"Stopping time of the ET-GP-UCB trigger: {args.runs} runs per eps, T = {args.horizon}, "
          f"grid {args.grid}x{args.grid}, delta_B = {wm.DELTA_B:g}, noise variance "
          f"{wm.NOISE_VARIANCE:g}")
    print(format_table(summary, args.horizon))
    rate = outcome.ran / outcome.wall_s if outcome.wall_s > 0 else float("nan")
    per = max(outcome.ran, 1)
    print(f"\nwall time {outcome.wall_s:.1f} s on {outcome.engine} for {outcome.ran} new tasks "
          f"({rate:.2f} tasks/s; per task {outcome.task_s / per:.3f} s wall and "
          f"{outcome.cpu_s / per:.3f} CPU-s inside the task)")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"config": {"runs": args.runs, "eps": list(args.eps), "horizon": args.horizon,
                      "grid": args.grid, "seed": args.seed, "delta_b": wm.DELTA_B,
                      "noise_variance": wm.NOISE_VARIANCE, "lengthscale": wm.LENGTHSCALE,
                      "beta": [wm.BETA_C1, wm.BETA_C2]},
           "wall_time_s": round(outcome.wall_s, 2), "engine": outcome.engine,
           "new_tasks": outcome.ran, "task_s_total": round(outcome.task_s, 2),
           "task_cpu_s_total": round(outcome.cpu_s, 2),
           "summary": summary}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    if not args.no_plots:
        try:
            print(f"wrote {figure(summary, args.horizon, args.out)}", file=sys.stderr)
        except ImportError:
            print("no plot: matplotlib is not installed (pip install 'tvbod[plots]')",
                  file=sys.stderr)
    print(f"wrote {args.out / 'results.json'}", file=sys.stderr)
    return 0
