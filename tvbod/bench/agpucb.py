"""`tvbod bench agpucb`: the two 1-D experiments of Berkenkamp, Schoellig & Krause, "No-Regret
Bayesian Optimization with Unknown Hyperparameters" (JMLR 2019), on `[0, 1]`.

1. `rkhs`: `f = sum_i a_i k(x, c_i)` with an SE kernel of lengthscale 0.1 and RKHS norm
   `sqrt(a^T K a) = 2` (10 random centers per run). A-GP-UCB (MAP lengthscale, `p(t) = t^0.9`,
   `B_0 = 2`) against GP-UCB with the true lengthscale, MAP-only GP-UCB, and the Wang & de Freitas
   variant (smallest scaling with `sigma_t(x_{t+1}) >= 0.1`).
2. `wrong-prior`: functions of RKHS norm 4 (same kernel), initial guesses `B_0 = 0.25` and
   `theta_0 = 1` (true 0.1): GP-UCB with the wrong lengthscale, MAP-only GP-UCB and A-GP-UCB (both
   start at 1), and the true-lengthscale GP-UCB for reference.

All use `beta_t = 0.4 ln(4t)` as the base schedule (A-GP-UCB adds its norm term `b(t) g(t)^(d/2) B_0`),
noise std 0.01 (variance 1e-4), MAP under a Gamma(2, 2) prior bounded to [0.01, 10], `T = 100`.
Regret uses the noise-free `f`; `f*` is the maximum on a 10,001-point grid.
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

TRUE_LS, NOISE_STD, HORIZON, CENTERS = 0.1, 0.01, 100, 10
MAP = {"lengthscales": "map", "prior": {"shape": 2.0, "rate": 2.0}, "bounds": [0.01, 10.0]}
EXPERIMENTS = {
    "rkhs": {"norm": 2.0, "algos": (
        ("GP-UCB (true theta=0.1)", {"kernel": {"lengthscales": TRUE_LS}}),
        ("GP-UCB (MAP only)", {"kernel": {"lengthscales": 1.0}, "hyperparameters": MAP}),
        ("A-GP-UCB (MAP, p=t^0.9)", {"kernel": {"lengthscales": 1.0}, "hyperparameters": MAP,
                                     "exploration": {"type": "agpucb", "norm_bound": 2.0,
                                                     "exponent": 0.9}}),
        ("Wang-de Freitas (sigma>=0.1)", {"kernel": {"lengthscales": 1.0}, "hyperparameters": MAP,
                                          "exploration": {"type": "agpucb", "norm_bound": 2.0,
                                                          "estimator": "sigma-floor"}}),
    )},
    "wrong-prior": {"norm": 4.0, "algos": (
        ("GP-UCB (wrong theta=1)", {"kernel": {"lengthscales": 1.0}}),
        ("GP-UCB (MAP only, from 1)", {"kernel": {"lengthscales": 1.0}, "hyperparameters": MAP}),
        ("A-GP-UCB (B0=0.25, theta0=1)", {"kernel": {"lengthscales": 1.0}, "hyperparameters": MAP,
                                          "exploration": {"type": "agpucb", "norm_bound": 0.25}}),
        ("GP-UCB (true theta=0.1)", {"kernel": {"lengthscales": TRUE_LS}}),
    )},
}


def rkhs_function(norm: float, rng: np.random.Generator):
    """`(f, grid values)`: `f(x) = sum_i a_i exp(-(x - c_i)^2 / (2 0.1^2))` with `||f||_H = norm`."""
    c = rng.random(CENTERS)
    a = rng.standard_normal(CENTERS)
    K = np.exp(-0.5 * (c[:, None] - c[None]) ** 2 / TRUE_LS**2)
    a *= norm / np.sqrt(a @ K @ a)

    def f(x):
        x = np.atleast_1d(np.asarray(x, dtype=float)).reshape(-1)
        return np.exp(-0.5 * (x[:, None] - c[None]) ** 2 / TRUE_LS**2) @ a

    return f, f(np.linspace(0.0, 1.0, 10001))


def run_task(exp: str, label: str, keys: dict, run: int, seed: int, horizon: int) -> dict:
    from tvbod.core import make_strategy

    rs = pr.run_seed(seed, run)
    f, grid = rkhs_function(EXPERIMENTS[exp]["norm"], np.random.default_rng([rs, 0]))
    f_star = float(grid.max())
    noise = NOISE_STD * np.random.default_rng([rs, 1]).standard_normal(horizon)
    spec = {"strategy": "gp-ucb", "seed": rs, "domain": {"lower": [0.0], "upper": [1.0]},
            "noise_variance": NOISE_STD**2, "budget": {"candidates": 256},
            "measurement": {"offset": 0.0, "scale": 1.0}, **keys}  # f is on the GP's scale
    s = make_strategy(spec)
    regret, g, ls = [], [], []
    t0 = time.process_time()
    for t in range(horizon):
        x = s.ask()
        fx = float(f(x)[0])
        regret.append(f_star - fx)
        s.tell(x, fx + noise[t])
        g.append(getattr(s.exploration, "h_", 1.0))
        ls.append(float(s.lengthscales[0]))
    return {"exp": exp, "label": label, "run": run, "regret": regret, "g": g, "lengthscale": ls,
            "cpu_s": time.process_time() - t0}


def summarize(results: list[dict]) -> list[dict]:
    groups: dict = {}
    for r in results:
        groups.setdefault((r["exp"], r["label"]), []).append(r)
    out = []
    for (exp, label), rs in groups.items():
        R = np.array([r["regret"] for r in rs])
        simple = np.minimum.accumulate(R, axis=1)
        cum = np.cumsum(R, axis=1)
        out.append({"exp": exp, "label": label, "runs": len(rs),
                    "simple_T_mean": float(simple[:, -1].mean()), "simple_T_std": float(simple[:, -1].std()),
                    "cum_T_mean": float(cum[:, -1].mean()), "cum_T_std": float(cum[:, -1].std()),
                    "found_share": float(np.mean(simple[:, -1] < 0.05)),
                    "final_ls_median": float(np.median([r["lengthscale"][-1] for r in rs])),
                    "final_g_median": float(np.median([r["g"][-1] for r in rs])),
                    "simple_mean": simple.mean(0).round(5).tolist(), "cum_mean": cum.mean(0).round(4).tolist(),
                    "g_mean": np.mean([r["g"] for r in rs], axis=0).round(4).tolist(),
                    "cpu_s_mean": float(np.mean([r["cpu_s"] for r in rs]))})
    return out


def format_table(summary: list[dict]) -> str:
    lines = ["| experiment | algorithm | simple regret r_T | cumulative R_T | runs with r_T < 0.05 | "
             "median final theta | median final g | cpu s/run |", "|" + " --- |" * 8]
    for a in summary:
        lines.append(f"| {a['exp']} | {a['label']} | {a['simple_T_mean']:.3f} +- {a['simple_T_std']:.3f} | "
                     f"{a['cum_T_mean']:.1f} +- {a['cum_T_std']:.1f} | {a['found_share']:.0%} | "
                     f"{a['final_ls_median']:.3g} | {a['final_g_median']:.3g} | {a['cpu_s_mean']:.1f} |")
    return "\n".join(lines)


def figures(summary: list[dict], out: Path) -> Path:
    from . import plots

    exps = list(EXPERIMENTS)
    fig, axes = plots.panel_grid(3 * len(exps), ncols=3)
    for row, exp in enumerate(exps):
        ax_s, ax_c, ax_g = axes[3 * row: 3 * row + 3]
        for a in (a for a in summary if a["exp"] == exp):
            t = range(1, len(a["simple_mean"]) + 1)
            ax_s.plot(t, a["simple_mean"], label=a["label"])
            ax_c.plot(t, a["cum_mean"], label=a["label"])
            ax_g.plot(t, a["g_mean"], label=a["label"])
        ax_s.set(title=f"{exp}: simple regret", xlabel="t", yscale="log")
        ax_c.set(title=f"{exp}: cumulative regret", xlabel="t")
        ax_g.set(title=f"{exp}: g(t) (mean)", xlabel="t")
        ax_s.legend(fontsize=6)
    return plots.save(fig, out / "agpucb.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, help="runs per experiment (default 20)")
    parser.add_argument("--horizon", type=int, default=HORIZON)
    sweep.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 runs, T = 30")
    parser.add_argument("--out", type=Path, default=Path("bench-out/agpucb"))
    parser.add_argument("--no-plots", action="store_true")


def run(args: argparse.Namespace) -> int:
    runs, horizon = (3, 30) if args.quick else (args.runs, args.horizon)
    jobs = [(exp, label, keys, r, args.seed, horizon)
            for exp, e in EXPERIMENTS.items() for label, keys in e["algos"] for r in range(runs)]
    tasks = [sweep.task(run_task, *job, seed=pr.run_seed(args.seed, job[3])) for job in jobs]
    outcome = sweep.run(tasks, args, "agpucb")
    if outcome.failures:
        return 1
    results, wall = outcome.ordered(tasks), outcome.wall_s
    summary = summarize(results)
    print(format_table(summary))
    print(f"\nwall time {wall:.1f} s on {outcome.engine} for {outcome.ran} new tasks")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"config": {"runs": runs, "horizon": horizon, "seed": args.seed, "noise_std": NOISE_STD},
           "wall_time_s": round(wall, 1), "summary": summary}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    if not args.no_plots:
        print(f"wrote {figures(summary, args.out)}", file=sys.stderr)
    return 0
