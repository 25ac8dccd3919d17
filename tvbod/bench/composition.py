"""`tvbod bench adaptive --composition within-model|cartpole`: ET-GP-UCB next to
ET-GP-UCB + adaptive kappa/lambda and ET-GP-UCB + A-GP-UCB, every variant on the same realisations
as the original benchmark, with paired comparisons and reset diagnostics around the jump."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import plant_runs as pr
from . import sweep
from .adaptive_settings import KAPPA0

COMPOSED = (("ET-GP-UCB", {}),
            ("ET-GP-UCB + adaptive kappa", {"exploration": {"type": "adaptive", "kappa0": KAPPA0,
                                                            "lambda0": 0.01}}),
            ("ET-GP-UCB + A-GP-UCB", {"exploration": {"type": "agpucb", "norm_bound": 0.5}}),
            # sensitivity: a smaller norm-bound guess B_0 (the norm term b(tau) h^(d/2) B_0 is added
            # to sqrt(beta_t), so B_0 sets how much extra exploration A-GP-UCB buys)
            ("ET-GP-UCB + A-GP-UCB (B_0 = 0.1)", {"exploration": {"type": "agpucb", "norm_bound": 0.1}}))


#: Runs per variant when `--trials` is not given: the sizes reported in docs/benchmarks.md.
DEFAULT_RUNS = {"within-model": 50, "cartpole": 30}


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
                       "delta_b": wm.DELTA_B, "measurement": {"offset": 0.0, "scale": 1.0},
                       **keys})
    idx, resets, t0 = np.empty(horizon, dtype=int), [], time.process_time()
    for t in range(horizon):
        x = s.ask()
        i = idx[t] = wm.grid_index(x)
        if s.tell(x, float(F[t, i] + noise[t])).reset:
            resets.append(t + 1)
    return {"run": run, "label": label, "regret": wm.regret(F, idx).tolist(), "reset_times": resets,
            "exploration": None if s.exploration is None else s.exploration.state_dict(),
            "cpu_s": time.process_time() - t0, "realisation": {"optimum": float(F.max(axis=1).sum())}}


def run_composition(args: argparse.Namespace) -> int:
    from . import cartpole as cp

    algos = tuple(pr.Algo(label, "et-gp-ucb", tuple(keys.items())) for label, keys in COMPOSED)
    runs = args.trials or DEFAULT_RUNS[args.composition]
    if args.composition == "cartpole":
        sc = cp.measurement_scaling()
        cfg = cp.Config(args.horizon or cp.HORIZON, cp.JUMP_AT, offset=sc["offset"],
                        scale=sc["scale"])
        jobs = [(r, a, args.seed, cfg) for r in range(runs) for a in algos]
        task, horizon = cp.run_task, cfg.horizon
    else:
        horizon = args.horizon or 400
        jobs = [(r, a.label, dict(a.params), args.seed, horizon, 0.03)
                for r in range(runs) for a in algos]
        task = within_model_task
    fig_dir = args.out / f"composition-{args.composition}"
    tasks = [sweep.task(task, *job, seed=pr.run_seed(args.seed, job[0])) for job in jobs]
    outcome = sweep.run(tasks, args, f"composition {args.composition}", fig_dir / "runs.jsonl")
    if outcome.failures:
        return 1
    results, wall = outcome.ordered(tasks), outcome.wall_s
    summary = pr.summarize(algos, results, runs, horizon)
    jump = cp.JUMP_AT if args.composition == "cartpole" else None
    diag = composition_diagnostics(summary, results, jump)
    print(pr.format_table(summary, f"{args.composition}: ET-GP-UCB compositions, {runs} runs, "
                                   f"T = {horizon}"))
    print()
    print(format_diagnostics(diag, jump))
    print(f"\nwall time {wall:.1f} s on {outcome.engine} for {outcome.ran} new tasks")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"composition-{args.composition}.json").write_text(
        json.dumps({"wall_time_s": round(wall, 1), "runs": runs, "horizon": horizon,
                    "diagnostics": diag, "algorithms": summary}, indent=1, default=str))
    if not args.no_plots:
        fig_dir.mkdir(parents=True, exist_ok=True)
        for path in pr.figures(summary, horizon, fig_dir, args.composition, change_at=jump):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def composition_diagnostics(summary: list[dict], results: list[dict], jump: int | None) -> list[dict]:
    """Per variant: paired comparison with plain ET-GP-UCB (runs with lower / higher `R_T` on the
    same realisation), resets before and after the jump (cart-pole), and the exploration state at
    the end (`kappa`, `lambda`; A-GP-UCB's `h`), as medians over runs."""
    base = np.array(summary[0]["R_T"])
    out = []
    for a in summary:
        R = np.array(a["R_T"])
        states = [r["exploration"] for r in results if r["label"] == a["label"] and r.get("exploration")]
        d = {"label": a["label"], "better_than_et": int(np.sum(R < base)),
             "worse_than_et": int(np.sum(R > base)), "runs": len(R),
             "final_state_median": {k: float(np.median([s[k] for s in states]))
                                    for k in ("kappa", "lambda", "h")
                                    if states and states[0].get(k) is not None}}
        if jump is not None:
            det = pr.detection_stats(a["reset_times"], jump, window=0)
            false_mean = det["false_resets"] / det["runs"]
            d |= {"false_resets_mean": false_mean, "runs_with_false_resets": det["runs_with_false"],
                  "resets_after_jump_mean": a["resets_mean"] - false_mean,
                  "detection_delay_median": det["median_delay"], "detected": det["detected"]}
        out.append(d)
    return out


def format_diagnostics(diag: list[dict], jump: int | None) -> str:
    head = "| variant | runs better / worse than ET-GP-UCB | final state (median) |"
    if jump is not None:
        head += f" resets before t = {jump} (mean; runs) | resets from t = {jump} (mean) | detection delay (median; detected) |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for d in diag:
        state = ", ".join(f"{k} {v:.3g}" for k, v in d["final_state_median"].items()) or "-"
        row = f"| {d['label']} | {d['better_than_et']} / {d['worse_than_et']} of {d['runs']} | {state} |"
        if jump is not None:
            delay = "-" if d["detection_delay_median"] is None else f"{d['detection_delay_median']:g}"
            row += (f" {d['false_resets_mean']:.2f} ({d['runs_with_false_resets']}) |"
                    f" {d['resets_after_jump_mean']:.2f} | {delay} ({d['detected']}/{d['runs']}) |")
        lines.append(row)
    return "\n".join(lines)
