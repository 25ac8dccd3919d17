"""`tvbod bench adaptive`: adaptive kappa/lambda (issue 6) against GP-UCB with fixed kappa, GP-EI and
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
from .testfunctions import ALL_PROBLEMS, problem

NOISES = (0.001, 0.005, 0.01, 0.05)
LAMBDAS = (0.001, 0.01, 0.1)
KAPPAS = (0.1, 0.5, 1.0, 2.0)
KAPPA0, KAPPA_MIN, KAPPA_MAX, LAMBDA_MAX = 2.0, 0.1, 10.0, 1.0
QUICK = {"problems": ("branin", "levy-5", "hartmann6"), "noises": (0.01,), "trials": 5}
LEVELS = (0.9, 0.95, 0.99)


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
    """Adaptive (best lambda_1) vs the best fixed kappa, per (problem, noise), by mean regret."""
    out = []
    keys = sorted({(a["problem"], a["noise"]) for a in summary})
    for name, noise in keys:
        rows = [a for a in summary if (a["problem"], a["noise"]) == (name, noise)]
        ad = min((a for a in rows if a["label"].startswith("adaptive")), key=lambda a: a["regret_mean"])
        fx = min((a for a in rows if a["label"].startswith("GP-UCB")), key=lambda a: a["regret_mean"])
        out.append({"problem": name, "noise": noise, "adaptive_wins": ad["regret_mean"] < fx["regret_mean"],
                    "adaptive": [ad["label"], ad["regret_mean"]], "fixed": [fx["label"], fx["regret_mean"]]})
    return out


def kappa_figure(summary: list[dict], out: Path) -> Path:
    from . import plots

    probs = sorted({(a["problem"], a["noise"]) for a in summary if a["kappa_mean"]})
    fig, axes = plots.panel_grid(len(probs))
    for ax, (name, noise) in zip(axes, probs):
        for a in summary:
            if (a["problem"], a["noise"]) == (name, noise) and a["label"].startswith("adaptive"):
                ax.plot(range(1, len(a["kappa_mean"]) + 1), a["kappa_mean"], label=a["label"])
        ax.set(title=f"{name}, noise {noise:g}", xlabel="evaluation", ylabel="mean kappa_t")
        ax.legend(fontsize=7)
    return plots.save(fig, out / "kappa.png")


# ---------------------------------------------------------------------- composition with the trigger
COMPOSED = (("ET-GP-UCB", {}),
            ("ET-GP-UCB + adaptive kappa", {"exploration": {"type": "adaptive", "kappa0": KAPPA0,
                                                            "lambda0": 0.01}}),
            ("ET-GP-UCB + A-GP-UCB", {"exploration": {"type": "agpucb", "norm_bound": 0.5}}))


def within_model_task(run: int, label: str, keys: dict, seed: int, horizon: int, eps: float) -> dict:
    """One ET-GP-UCB variant on the within-model draw of `run` (same draws as `bench within-model`)."""
    import math

    from tvbod.core import make_strategy

    from . import within_model as wm

    rs = wm.run_seed(seed, run)
    F = wm.sample_functions(wm.sampler_factor(), eps, horizon, np.random.default_rng([rs, 0]))
    noise = math.sqrt(wm.NOISE_VARIANCE) * np.random.default_rng([rs, 1]).standard_normal(horizon)
    s = make_strategy({"strategy": "et-gp-ucb", "seed": rs,
                       "domain": {"type": "points", "points": wm.grid_points()},
                       "kernel": {"type": "se", "lengthscales": wm.LENGTHSCALE},
                       "noise_variance": wm.NOISE_VARIANCE, "beta": {"c1": wm.BETA_C1, "c2": wm.BETA_C2},
                       "delta_b": wm.DELTA_B, **keys})
    idx, resets, t0 = np.empty(horizon, dtype=int), [], time.process_time()
    for t in range(horizon):
        x = s.ask()
        i = idx[t] = wm.grid_index(x)
        if s.tell(x, float(F[t, i] + noise[t])).reset:
            resets.append(t + 1)
    return {"run": run, "label": label, "regret": wm.regret(F, idx).tolist(), "reset_times": resets,
            "cpu_s": time.process_time() - t0, "realisation": {"optimum": float(F.max(axis=1).sum())}}


def run_composition(args: argparse.Namespace) -> int:
    from . import cartpole as cp

    algos = tuple(pr.Algo(label, "et-gp-ucb", tuple(keys.items())) for label, keys in COMPOSED)
    if args.composition == "cartpole":
        sc = cp.measurement_scaling()
        cfg = cp.Config(args.horizon or cp.HORIZON, cp.JUMP_AT, sc["offset"], sc["scale"])
        jobs = [(r, a, args.seed, cfg) for r in range(args.trials or 3) for a in algos]
        task, horizon = cp.run_task, cfg.horizon
    else:
        horizon = args.horizon or 400
        jobs = [(r, a.label, dict(a.params), args.seed, horizon, 0.03)
                for r in range(args.trials or 3) for a in algos]
        task = within_model_task
    t0 = time.perf_counter()
    results = pr.execute(task, jobs, args.workers, pr.progress_line(args.composition))
    wall = time.perf_counter() - t0
    summary = pr.summarize(algos, results, args.trials or 3, horizon)
    print(pr.format_table(summary, f"{args.composition}: ET-GP-UCB compositions, "
                                   f"{args.trials or 3} runs, T = {horizon}"))
    print(f"\nwall time {wall:.1f} s with {args.workers} worker(s)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"composition-{args.composition}.json").write_text(
        json.dumps({"wall_time_s": round(wall, 1), "algorithms": summary}, indent=1, default=str))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--composition", choices=("cartpole", "within-model"), default=None,
                        help="instead: ET-GP-UCB vs ET-GP-UCB + adaptive / + A-GP-UCB on a benchmark "
                             "(--trials runs, default 3; --horizon)")
    parser.add_argument("--horizon", type=int, default=None, help="composition horizon")
    parser.add_argument("--quick", action="store_true",
                        help=f"CI subset: {', '.join(QUICK['problems'])}, noise 0.01, 5 trials")
    parser.add_argument("--problems", default=None, help="comma list (default: all 14)")
    parser.add_argument("--noises", default=None, help="comma list of noise stds")
    parser.add_argument("--trials", type=int, default=None, help="trials (default 30)")
    parser.add_argument("--evals", type=int, default=100, help="evaluations per trial (default 100)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-out/adaptive"))
    parser.add_argument("--no-plots", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.composition:
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
    jobs = [(name, noise, label, keys, trial, args.seed, args.evals)
            for name in problems for noise in noises for label, keys in algorithms()
            for trial in range(trials)]
    t0 = time.perf_counter()
    results = pr.execute(run_task, jobs, args.workers,
                         lambda d, n, r: print(f"[{d}/{n}] {r['problem']} {r['noise']:g} {r['label']} "
                                               f"#{r['trial']}", file=sys.stderr, flush=True))
    wall = time.perf_counter() - t0
    summary = summarize(results, args.evals)
    checks = claims(summary)
    print(format_table(summary))
    print()
    for c in checks:
        print(f"{c['problem']} noise {c['noise']:g}: adaptive {'beats' if c['adaptive_wins'] else 'does not beat'}"
              f" fixed kappa ({c['adaptive'][0]} {c['adaptive'][1]:.4g} vs {c['fixed'][0]} {c['fixed'][1]:.4g})")
    print(f"\nwall time {wall:.1f} s with {args.workers} worker(s), {len(jobs)} runs")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"config": {"problems": list(problems), "noises": list(noises), "trials": trials,
                      "evals": args.evals, "seed": args.seed, "quick": args.quick},
           "wall_time_s": round(wall, 1), "summary": summary, "claims": checks}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    if not args.no_plots:
        print(f"wrote {kappa_figure(summary, args.out)}", file=sys.stderr)
    return 0
