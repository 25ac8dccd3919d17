"""`tvbod bench adaptive`: adaptive kappa/lambda against GP-UCB with fixed kappa, GP-EI and
Sobol random search on standard test functions, 100 evaluations, 30 trials per setting.

Every algorithm is a `tvbod.core` strategy on a box: Matern-5/2 kernel (signal variance 1) on the
unit cube, lengthscales by MAP (Gamma(3, 6) prior, bounds [0.02, 5]) refit every 10 evaluations,
1024 Sobol candidates + L-BFGS-B from the best 5. Measurements are standardized before the run
(offset = median, scale = std of the noise-free objective over 1024 Sobol points, seed 0) and the
noise (std in {0.001, 0.005, 0.01, 0.05}) is added on that standardized scale. Fixed-kappa GP-UCB
is the adaptive strategy with `kappa_rate = 0` and `lambda0 = 0` (`kappa_t = kappa` exactly).
Progress `s = (f_ref - best) / (f_ref - f_min)` with `f_ref` the Sobol median: "evaluations to 90 %"
is the first evaluation with `s >= 0.9` (noise-free value of the evaluated point).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from . import plant_runs as pr
from . import sweep
from .adaptive_settings import KAPPA0, KAPPA_MAX, KAPPA_MIN, LAMBDA_MAX
from .testfunctions import ALL_PROBLEMS, problem

NOISES = (0.001, 0.005, 0.01, 0.05)
LAMBDAS = (0.001, 0.01, 0.1)
KAPPAS = (0.1, 0.5, 1.0, 2.0)
QUICK = {"problems": ("branin", "levy-5", "hartmann6"), "noises": (0.01,), "trials": 5}
LEVELS = (0.9, 0.95, 0.99)
ALPHA = 0.05  # significance level of the per-cell adaptive-vs-fixed test


def algorithms() -> list[tuple[str, dict]]:
    """`(label, spec keys)` in table order."""
    out = [(f"adaptive (lambda_1={lam:g})",
            {"exploration": {"type": "adaptive", "kappa0": KAPPA0, "kappa_min": KAPPA_MIN,
                             "kappa_max": KAPPA_MAX, "lambda0": lam, "lambda_max": LAMBDA_MAX}})
           for lam in LAMBDAS]
    out += [(f"GP-UCB (kappa={k:g})",
             {"exploration": {"type": "adaptive", "kappa0": k, "kappa_min": min(k, KAPPA_MIN),
                              "kappa_max": max(k, KAPPA_MAX), "lambda0": 0.0, "kappa_rate": 0.0}})
            for k in KAPPAS]
    return out + [("GP-EI", {"acquisition": "ei"}), ("Sobol random", {"strategy": "random-search"})]


def standardization(name: str) -> tuple[float, float]:
    """`(offset, scale)`: median and std of the objective over 1024 scrambled Sobol points (seed 0)."""
    from scipy.stats import qmc

    p = problem(name)
    lo, hi = np.array(p.lower), np.array(p.upper)
    v = p(lo + qmc.Sobol(p.dim, scramble=True, seed=0).random_base2(10) * (hi - lo))
    return float(np.median(v)), float(np.std(v))


def run_task(name: str, noise: float, label: str, keys: dict, trial: int, seed: int,
             evals: int) -> dict:
    from tvbod.core import make_strategy

    p = problem(name)
    offset, scale = standardization(name)
    rs = pr.run_seed(seed, trial)
    spec = {"strategy": "gp-ucb", "sense": "minimize", "seed": rs,
            "domain": {"lower": list(p.lower), "upper": list(p.upper)},
            "kernel": {"type": "matern52", "lengthscales": 0.3},
            "noise_variance": max(noise**2, 1e-6),
            "measurement": {"offset": offset, "scale": scale},
            "hyperparameters": {"lengthscales": "map", "prior": {"shape": 3.0, "rate": 6.0},
                                "bounds": [0.02, 5.0], "refit_every": 10}, **keys}
    if keys.get("strategy") == "random-search":
        spec = {k: spec[k] for k in ("sense", "seed", "domain")} | keys
    s = make_strategy(spec)
    noise_rng = np.random.default_rng([rs, 7])
    values, kappas = [], []
    t0 = time.perf_counter()
    for _ in range(evals):
        x = s.ask()
        f = float(p(x[None])[0])
        values.append(f)
        kappas.append(getattr(s, "kappa", None))
        s.tell(x, f + scale * noise * noise_rng.standard_normal())
    wall = time.perf_counter() - t0
    return {"problem": name, "noise": noise, "label": label, "trial": trial, "values": values,
            "kappas": kappas, "s_per_iter": wall / evals}


def summarize(results: list[dict], evals: int) -> list[dict]:
    groups: dict = {}
    for r in results:
        groups.setdefault((r["problem"], r["noise"], r["label"]), []).append(r)
    out = []
    for (name, noise, label), rs in groups.items():
        p = problem(name)
        f_ref = standardization(name)[0]
        best = np.array([np.minimum.accumulate(r["values"]) for r in rs])  # (trials, evals)
        prog = (f_ref - best) / (f_ref - p.f_min)
        reach = {}
        for lv in LEVELS:
            hit = [int(np.argmax(row >= lv)) + 1 if np.any(row >= lv) else None for row in prog]
            got = [h for h in hit if h is not None]
            reach[f"{lv:g}"] = {"mean": float(np.mean(got)) if got else None,
                                "reached": len(got), "trials": len(hit)}
        kap = [r["kappas"] for r in rs if r["kappas"][0] is not None]
        out.append({"problem": name, "noise": noise, "label": label, "trials": len(rs),
                    "best_mean": float(best[:, -1].mean()), "best_std": float(best[:, -1].std()),
                    "regret_mean": float((best[:, -1] - p.f_min).mean()),
                    "regret_std": float((best[:, -1] - p.f_min).std()),
                    "norm_regret_mean": float((1.0 - prog[:, -1]).mean()),
                    "regrets": (best[:, -1] - p.f_min).tolist(),
                    "reach": reach, "ms_per_iter": 1e3 * float(np.mean([r["s_per_iter"] for r in rs])),
                    "kappa_mean": np.mean(kap, axis=0).round(4).tolist() if kap else None})
    return out


def format_table(summary: list[dict]) -> str:
    lines = ["| problem | noise | algorithm | best f (mean +- std) | simple regret | evals to 90/95/99 % "
             "(mean; reached/trials) | ms/iter |", "|" + " --- |" * 7]
    for a in summary:
        r = a["reach"]
        cells = []
        for lv in ("0.9", "0.95", "0.99"):
            m = r[lv]["mean"]
            cells.append(f"{m:.0f} ({r[lv]['reached']}/{r[lv]['trials']})" if m is not None
                         else f"- (0/{r[lv]['trials']})")
        lines.append(f"| {a['problem']} | {a['noise']:g} | {a['label']} | {a['best_mean']:.4g} +- "
                     f"{a['best_std']:.2g} | {a['regret_mean']:.4g} +- {a['regret_std']:.2g} | "
                     f"{' / '.join(cells)} | {a['ms_per_iter']:.1f} |")
    return "\n".join(lines)


def claims(summary: list[dict]) -> list[dict]:
    """Adaptive (best lambda_1) vs the best fixed kappa, per (problem, noise), by mean regret; with
    the per-trial regrets, also a two-sided Mann-Whitney U test of the two (`p_value`)."""
    from scipy.stats import mannwhitneyu

    out = []
    keys = sorted({(a["problem"], a["noise"]) for a in summary})
    for name, noise in keys:
        rows = [a for a in summary if (a["problem"], a["noise"]) == (name, noise)]
        ad = min((a for a in rows if a["label"].startswith("adaptive")), key=lambda a: a["regret_mean"])
        fx = min((a for a in rows if a["label"].startswith("GP-UCB")), key=lambda a: a["regret_mean"])
        out.append({"problem": name, "noise": noise, "adaptive_wins": ad["regret_mean"] < fx["regret_mean"],
                    "adaptive": [ad["label"], ad["regret_mean"]], "fixed": [fx["label"], fx["regret_mean"]],
                    "ratio": ad["norm_regret_mean"] / max(fx["norm_regret_mean"], 1e-300)})
        if "regrets" in ad and "regrets" in fx:
            a, b = np.asarray(ad["regrets"]), np.asarray(fx["regrets"])
            p_value, favour = 1.0, False  # identical samples: nothing to test
            if not np.array_equal(np.sort(a), np.sort(b)):
                test = mannwhitneyu(a, b, alternative="two-sided")
                # the test's own direction (U below its mean: adaptive's regrets rank lower), which
                # can differ from the means' (a few stuck trials move a mean, not the ranks)
                p_value, favour = float(test.pvalue), float(test.statistic) < len(a) * len(b) / 2
            out[-1] |= {"p_value": p_value, "ranks_favour_adaptive": favour}
    return out


def format_cells(summary: list[dict], checks: list[dict]) -> str:
    """One row per (problem, noise): mean simple regret of the best adaptive and the best fixed kappa
    (which one in parentheses), GP-EI and Sobol random search, the test's p-value, the best of all."""
    lines = ["| problem | noise | best adaptive (lambda_1) | best fixed (kappa) | GP-EI | Sobol random "
             "| p (adaptive vs fixed; which ranks lower if p < 0.05) | best of the 9 |", "|" + " --- |" * 8]
    for c in checks:
        rows = {a["label"]: a for a in summary if (a["problem"], a["noise"]) == (c["problem"], c["noise"])}
        ad, fx = rows[c["adaptive"][0]], rows[c["fixed"][0]]
        best = min(rows.values(), key=lambda a: a["regret_mean"])

        def cell(a: dict, tag: str = "") -> str:
            text = f"{a['regret_mean']:.3g} +- {a['regret_std']:.2g}{tag}"
            return f"**{text}**" if a is best else text

        p = c.get("p_value")
        arrow = "" if p is None or p >= ALPHA else (" (adaptive)" if c["ranks_favour_adaptive"] else " (fixed)")
        lines.append(f"| {c['problem']} | {c['noise']:g} | {cell(ad, ' (' + ad['label'].split('=')[1])} | "
                     f"{cell(fx, ' (' + fx['label'].split('=')[1])} | {cell(rows['GP-EI'])} | "
                     f"{cell(rows['Sobol random'])} | {'-' if p is None else f'{p:.2g}{arrow}'} | {best['label']} |")
    return "\n".join(lines)


def dim_group(name: str) -> str:
    d = problem(name).dim
    return "d = 2" if d <= 2 else ("d = 5-6" if d <= 6 else "d = 10")


def aggregate(summary: list[dict], checks: list[dict]) -> dict:
    """The grid in a few numbers: each algorithm's mean rank (by mean simple regret, 1 = best, over
    all (problem, noise) cells), the cells it wins, and the adaptive-vs-fixed claim per dimension
    group and noise level: cells where the best adaptive beats the best fixed kappa, and the median
    ratio of their normalized regrets `(best - f_min) / (f_ref - f_min)` (< 1: adaptive better)."""
    cells = sorted({(a["problem"], a["noise"]) for a in summary})
    labels = [label for label, _ in algorithms()]
    ranks: dict[str, list[float]] = {label: [] for label in labels}
    wins = dict.fromkeys(labels, 0)
    for cell in cells:
        rows = {a["label"]: a["regret_mean"] for a in summary if (a["problem"], a["noise"]) == cell}
        order = sorted(rows, key=rows.get)
        wins[order[0]] += 1
        for i, label in enumerate(order):
            ranks[label].append(i + 1.0)
    groups: dict[str, list[dict]] = {}
    for g in ("d = 2", "d = 5-6", "d = 10"):
        groups[g] = [c for c in checks if dim_group(c["problem"]) == g]
    for noise in sorted({c["noise"] for c in checks}):
        groups[f"noise {noise:g}"] = [c for c in checks if c["noise"] == noise]
    groups = {g: cs for g, cs in groups.items() if cs} | {"all": checks}
    return {"cells": len(cells),
            "algorithms": [{"label": label, "mean_rank": float(np.mean(ranks[label])),
                            "cells_won": wins[label]} for label in labels if ranks[label]],
            "claim": {g: {"cells": len(cs), "adaptive_wins": sum(c["adaptive_wins"] for c in cs),
                          "significant_wins": sum(c.get("p_value", 1.0) < ALPHA
                                                  and c["ranks_favour_adaptive"] for c in cs),
                          "significant_losses": sum(c.get("p_value", 1.0) < ALPHA
                                                    and not c["ranks_favour_adaptive"] for c in cs),
                          "median_ratio": float(np.median([c["ratio"] for c in cs]))}
                      for g, cs in groups.items()}}


def format_aggregate(agg: dict) -> str:
    lines = [f"| algorithm | mean rank of {agg['cells']} cells (1 = best of 9) | cells won |",
             "| --- | --- | --- |"]
    lines += [f"| {a['label']} | {a['mean_rank']:.2f} | {a['cells_won']} |" for a in agg["algorithms"]]
    lines += ["", f"| cells | best adaptive beats best fixed kappa (mean regret) | adaptive "
                  f"significantly better (Mann-Whitney, p < {ALPHA:g}) | significantly worse | median "
                  "normalized-regret ratio (adaptive / fixed) |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {g} | {c['adaptive_wins']} of {c['cells']} | {c['significant_wins']} | "
              f"{c['significant_losses']} | {c['median_ratio']:.3g} |" for g, c in agg["claim"].items()]
    return "\n".join(lines)


def kappa_figure(summary: list[dict], out: Path) -> Path:
    """Mean `kappa_t` over trials: one panel per problem, one line per (adaptive variant, noise);
    the line style marks `lambda_1`, the colour the noise level."""
    from . import plots

    names = list(dict.fromkeys(a["problem"] for a in summary if a["kappa_mean"]))
    noises = sorted({a["noise"] for a in summary})
    styles = dict(zip(LAMBDAS, ("-", "--", ":")))
    fig, axes = plots.panel_grid(len(names), ncols=4)
    for ax, name in zip(axes, names):
        for a in summary:
            if a["problem"] == name and a["label"].startswith("adaptive"):
                lam = next(v for v in LAMBDAS if a["label"] == f"adaptive (lambda_1={v:g})")
                ax.plot(range(1, len(a["kappa_mean"]) + 1), a["kappa_mean"], styles[lam],
                        color=f"C{noises.index(a['noise'])}", lw=1,
                        label=f"noise {a['noise']:g}, lambda_1 {lam:g}")
        ax.set(title=name, xlabel="evaluation", ylabel="mean kappa_t", yscale="log")
    axes[0].legend(fontsize=6)
    return plots.save(fig, out / "kappa.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--composition", choices=("cartpole", "within-model"), default=None,
                        help="instead: ET-GP-UCB vs ET-GP-UCB + adaptive / + A-GP-UCB on a benchmark "
                             "(--trials runs, default 50 within-model / 30 cart-pole; --horizon)")
    parser.add_argument("--horizon", type=int, default=None, help="composition horizon")
    parser.add_argument("--quick", action="store_true",
                        help=f"CI subset: {', '.join(QUICK['problems'])}, noise 0.01, 5 trials")
    parser.add_argument("--problems", default=None, help="comma list (default: all 14)")
    parser.add_argument("--noises", default=None, help="comma list of noise stds")
    parser.add_argument("--trials", type=int, default=None, help="trials (default 30)")
    parser.add_argument("--evals", type=int, default=100, help="evaluations per trial (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-out/adaptive"))
    parser.add_argument("--no-plots", action="store_true")
    sweep.add_arguments(parser)



def run_key(problem_name: str, noise: float, label: str, trial: int, seed: int, evals: int) -> str:
    """Identity of one grid run in `runs.jsonl`: a resumed grid skips the runs already recorded."""
    return f"{problem_name}|{noise:g}|{label}|{trial}|{seed}|{evals}"


def run(args: argparse.Namespace) -> int:
    if args.composition:
        from .composition import run_composition

        return run_composition(args)
    problems = QUICK["problems"] if args.quick else ALL_PROBLEMS
    noises = QUICK["noises"] if args.quick else NOISES
    trials = args.trials or (QUICK["trials"] if args.quick else 30)
    if args.problems:
        problems = tuple(args.problems.split(","))
    if args.noises:
        noises = tuple(float(v) for v in args.noises.split(","))
    for name in problems:
        problem(name)  # fail early on a typo
    # Noise-major order: an interrupted grid leaves whole (problem, noise) cells, not scattered runs.
    jobs = [(name, noise, label, keys, trial, args.seed, args.evals)
            for noise in noises for name in problems for label, keys in algorithms()
            for trial in range(trials)]
    tasks = [sweep.task(run_task, n, z, lab, keys, tr, sd, ev, seed=pr.run_seed(sd, tr),
                        key=run_key(n, z, lab, tr, sd, ev)) for n, z, lab, keys, tr, sd, ev in jobs]
    outcome = sweep.run(tasks, args, "adaptive")
    if outcome.failures:
        return 1
    results, wall = outcome.ordered(tasks), outcome.wall_s
    summary = summarize(results, args.evals)
    checks = claims(summary)
    print(format_table(summary))
    print()
    for c in checks:
        print(f"{c['problem']} noise {c['noise']:g}: adaptive {'beats' if c['adaptive_wins'] else 'does not beat'}"
              f" fixed kappa ({c['adaptive'][0]} {c['adaptive'][1]:.4g} vs {c['fixed'][0]} {c['fixed'][1]:.4g})")
    cpu = sum(r["s_per_iter"] * args.evals for r in results)
    agg = aggregate(summary, checks)
    print()
    print(format_cells(summary, checks))
    print()
    print(format_aggregate(agg))
    print(f"\nwall time {wall:.1f} s on {outcome.engine} for {outcome.ran} new runs; "
          f"{len(jobs)} runs in the table ({cpu / 60:.1f} CPU-minutes of optimizer time in all)")
    doc = {"config": {"problems": list(problems), "noises": list(noises), "trials": trials,
                      "evals": args.evals, "seed": args.seed, "quick": args.quick},
           "wall_time_s": round(wall, 1), "new_runs": outcome.ran, "cpu_minutes": round(cpu / 60, 1),
           "aggregate": agg, "summary": summary, "claims": checks}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    if not args.no_plots:
        print(f"wrote {kappa_figure(summary, args.out)}", file=sys.stderr)
    return 0
