"""`tvbod bench within-model`: the synthetic experiment of Brunzema et al., "Event-Triggered
Time-Varying Bayesian Optimization" (arXiv 2208.10790), Sec. "within-model comparison".

The objective is drawn from the time-varying GP model itself (Bogunovic et al. 2016, B2P model):
`f_1 = g_1`, `f_t = sqrt(1 - eps) f_{t-1} + sqrt(eps) g_t`, `g_t` iid `GP(0, SE(0.2, 1))` on a
50 x 50 grid over `[0, 1]^2`; `y_t = f_t(x_t) + N(0, 0.02)`; `r_t = max f_t - f_t(x_t)`.
Every algorithm sees the same function draws and noise sequence in a run (common random numbers),
and the strategies come from `tvbod.core.make_strategy` on a `points` domain (the grid).

Runs go to the sweep executor (`tvbod.bench.sweep`: local processes or a Dask cluster). One task
is one (eps, run) pair and runs every algorithm any selected case needs at that eps on one draw.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import plant_runs as pr
from . import plots, sweep, wdbo
from .within_model_functions import (GRID, LENGTHSCALE, SAMPLER_JITTER, grid_index, grid_points,
                                     regret, sample_functions, sampler_factor)

NOISE_VARIANCE = 0.02
BETA_C1, BETA_C2 = 0.4, 4.0  # beta_t = 0.4 ln(4t)
DELTA_B = 0.1
EPSILONS = (0.01, 0.03, 0.05)
RESET_PERIODS = {0.01: 38, 0.03: 29, 0.05: 26}  # R-GP-UCB's N at the true eps
MISSPEC_EPS, MISSPEC_FORGETTING, MISSPEC_PERIOD = 0.05, 0.001, 68
SWEEP_EPS = 0.03
SWEEP_DELTAS = (0.005, 0.01, 0.05, 0.1, 0.5)
CASE_GROUPS = ("main", "misspecified", "delta-sweep")
#: The paper's ET-GP-UCB results (50 runs): `(mean resets, mean R_T)`.
PAPER_ET = {0.01: (3.38, 200.33), 0.03: (8.04, 271.59), 0.05: (11.88, 332.04)}
PAPER_SWEEP = {0.005: (6.42, 276.84), 0.01: (6.82, 273.37), 0.05: (7.72, 269.01),
               0.1: (8.04, 271.59), 0.5: (10.32, 280.05)}
PAPER_HORIZON = 400
#: Acceptance bands for ET-GP-UCB against the paper: R_T at most +10 %, resets within +-30 %.
RT_TOLERANCE, RESETS_TOLERANCE = 0.10, 0.30


# ---------------------------------------------------------------------- experiment definition
@dataclass(frozen=True)
class Algo:
    """One optimizer configuration: a core strategy name plus its extra spec keys."""

    strategy: str
    params: tuple[tuple[str, float], ...] = ()

    @property
    def key(self) -> str:
        extra = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in self.params)
        return f"{self.strategy}[{extra}]" if extra else self.strategy


@dataclass(frozen=True)
class Case:
    """A table block: the true `eps` and `(display label, Algo)` pairs, all on the same draws."""

    name: str
    group: str
    eps: float
    algos: tuple[tuple[str, Algo], ...]


#: ET-GP-UCB exactly as the paper's Algorithm 1 (the reproduction), and the robust default.
PAPER_ET_ALGO = Algo("et-gp-ucb", (("trigger", "paper"),))
ROBUST_ET_ALGO = Algo("et-gp-ucb", (("trigger", "robust"),))


def _main_algos(eps: float, period: int, forgetting: float) -> tuple[tuple[str, Algo], ...]:
    return (
        ("ET-GP-UCB", PAPER_ET_ALGO),
        ("ET-GP-UCB (robust trigger)", ROBUST_ET_ALGO),
        ("GP-UCB", Algo("gp-ucb")),
        (f"R-GP-UCB (N={period})", Algo("r-gp-ucb", (("reset_period", period),))),
        (f"TV-GP-UCB (eps={forgetting:g})", Algo("tv-gp-ucb", (("forgetting", forgetting),))),
    )


def with_wdbo(cases: list[Case]) -> list[Case]:
    """The main cases with a W-DBO row added (it has no eps to be told, so not the others)."""
    row = (wdbo.LABEL, Algo(wdbo.STRATEGY))
    return [replace(c, algos=c.algos + (row,)) if c.group == "main" else c for c in cases]


def build_cases(groups: tuple[str, ...]) -> list[Case]:
    """The cases of the selected groups (`main`, `misspecified`, `delta-sweep`), in table order."""
    cases = []
    if "main" in groups:
        cases += [Case(f"eps={e:g}", "main", e, _main_algos(e, RESET_PERIODS[e], e))
                  for e in EPSILONS]
    if "misspecified" in groups:
        cases.append(Case(f"misspecified (eps={MISSPEC_EPS:g})", "misspecified", MISSPEC_EPS,
                          _main_algos(MISSPEC_EPS, MISSPEC_PERIOD, MISSPEC_FORGETTING)))
    if "delta-sweep" in groups:
        # delta_B = 0.1 is the main case's ET-GP-UCB (same Algo, so it is run once).
        sweep = tuple((f"ET-GP-UCB (delta_B={d:g})",
                       PAPER_ET_ALGO if d == DELTA_B else Algo("et-gp-ucb", (("trigger", "paper"),
                                                                             ("delta_b", d))))
                      for d in SWEEP_DELTAS)
        cases.append(Case(f"delta sweep (eps={SWEEP_EPS:g})", "delta-sweep", SWEEP_EPS, sweep))
    return cases


def run_seed(seed: int, run: int) -> int:
    """The per-run seed shared by the function draw, the noise and every strategy of that run."""
    return int(np.random.SeedSequence([seed, run]).generate_state(1, np.uint32)[0])


# ---------------------------------------------------------------------- one run
@lru_cache(maxsize=64)
def _base_spec(algo: Algo, grid: int):
    from tvbod.core import parse_spec

    return parse_spec({
        "strategy": algo.strategy,
        "domain": {"type": "points", "points": grid_points(grid)},
        "kernel": {"type": "se", "lengthscales": LENGTHSCALE, "variance": 1.0},
        "noise_variance": NOISE_VARIANCE,
        "beta": {"c1": BETA_C1, "c2": BETA_C2},
        "delta_b": DELTA_B,
        "measurement": {"offset": 0.0, "scale": 1.0},  # F is drawn on the GP's scale
        **dict(algo.params),
    })


def run_algorithm(algo: Algo, F: np.ndarray, noise: np.ndarray, seed: int,
                  grid: int = GRID) -> dict:
    """Run one strategy for `len(F)` steps on the draw `F` with noise `noise`; regret and resets."""
    if algo.strategy == wdbo.STRATEGY:
        res = wdbo.run_within_model(F, noise, seed, grid_points(grid),
                                    lambda x: grid_index(x, grid))
        idx = res.pop("idx")
        return {**res, "regret": regret(F, idx)}
    from tvbod.core import make_strategy

    strategy = make_strategy(replace(_base_spec(algo, grid), seed=seed))
    idx = np.empty(len(F), dtype=int)
    reset_times = []
    for t in range(len(F)):
        x = strategy.ask()
        i = idx[t] = grid_index(x, grid)
        if strategy.tell(x, float(F[t, i] + noise[t])).reset:
            reset_times.append(t + 1)
    return {"regret": regret(F, idx), "reset_times": reset_times}


def run_task(eps: float, run: int, seed: int, horizon: int, algos: tuple[Algo, ...],
             grid: int = GRID) -> dict:
    """One draw of the objective at `eps` and every algorithm in `algos` on it."""
    rs = run_seed(seed, run)
    F = sample_functions(sampler_factor(grid), eps, horizon, np.random.default_rng([rs, 0]))
    noise = math.sqrt(NOISE_VARIANCE) * np.random.default_rng([rs, 1]).standard_normal(horizon)
    out = {}
    for algo in algos:
        t0 = time.process_time()
        res = run_algorithm(algo, F, noise, rs, grid)
        res["cpu_s"] = time.process_time() - t0
        res["optimum_sum"] = float(F.max(axis=1).sum())
        out[algo.key] = res
    return {"eps": eps, "run": run, "results": out}


def execute(cases: list[Case], args: argparse.Namespace) -> tuple[dict, sweep.Outcome]:
    """Run every (eps, run) task of `args.runs`, `--seed`, `--horizon`, `--grid` on the sweep
    executor; `{(eps, algo.key): [per-run result, ...]}` in run order (empty if a task failed)."""
    by_eps: dict[float, dict[str, Algo]] = {}
    for case in cases:
        for _, algo in case.algos:
            by_eps.setdefault(case.eps, {})[algo.key] = algo
    # Heaviest eps (most algorithms) first so the last tasks finish together.
    order = sorted(by_eps, key=lambda e: -len(by_eps[e]))
    tasks = [sweep.task(run_task, e, r, args.seed, args.horizon, tuple(by_eps[e].values()),
                        args.grid, seed=run_seed(args.seed, r))
             for r in range(args.runs) for e in order]
    outcome = sweep.run(tasks, args, "within-model")
    results: dict = {}
    for out in [] if outcome.failures else outcome.ordered(tasks):
        for key, res in out["results"].items():
            res = dict(res, regret=np.asarray(res["regret"]))
            results.setdefault((out["eps"], key), {})[out["run"]] = res
    return {k: [v[r] for r in range(args.runs)] for k, v in results.items()}, outcome


# ---------------------------------------------------------------------- summary
def summarize(cases: list[Case], results: dict, horizon: int) -> list[dict]:
    """Per case and algorithm: R_T and reset statistics (std with ddof=0), the paper's values."""
    t = np.arange(1, horizon + 1)
    out = []
    for case in cases:
        algos = []
        for label, algo in case.algos:
            per_run = results[(case.eps, algo.key)]
            R = np.array([r["regret"].sum() for r in per_run])
            n_resets = np.array([len(r["reset_times"]) for r in per_run])
            curves = np.array([np.cumsum(r["regret"]) / t for r in per_run])
            algos.append({
                "label": label, "strategy": algo.strategy, "params": dict(algo.params),
                "R_T_mean": float(R.mean()), "R_T_std": float(R.std()),
                "resets_mean": float(n_resets.mean()), "resets_std": float(n_resets.std()),
                "cpu_s_mean": float(np.mean([r["cpu_s"] for r in per_run])),
                "paper": _paper_value(case, algo),
                "R_T": R.round(4).tolist(), "resets": n_resets.tolist(),
                "reset_times": [r["reset_times"] for r in per_run],
                "optimum_sum": [round(r["optimum_sum"], 8) for r in per_run],
                "mean_R_t_over_t": curves.mean(axis=0).round(5).tolist(),
                "sem_R_t_over_t": (curves.std(axis=0) / math.sqrt(len(per_run))).round(5).tolist(),
            })
        out.append({"case": case.name, "group": case.group, "eps": case.eps, "algorithms": algos})
    return out


def _paper_value(case: Case, algo: Algo) -> dict | None:
    if algo.strategy != "et-gp-ucb" or dict(algo.params).get("trigger") != "paper":
        return None
    if case.group == "delta-sweep":
        resets, rt = PAPER_SWEEP[dict(algo.params).get("delta_b", DELTA_B)]
    elif case.group == "main":
        resets, rt = PAPER_ET[case.eps]
    else:
        return None
    return {"R_T": rt, "resets": resets}


def _find(summary: list[dict], group: str, eps: float, strategy: str) -> dict | None:
    for case in summary:
        if case["group"] == group and case["eps"] == eps:
            return next((a for a in case["algorithms"] if a["strategy"] == strategy), None)
    return None


def check_claims(summary: list[dict], horizon: int = PAPER_HORIZON, grid: int = GRID) -> list[dict]:
    """The paper's three claims and (in the paper's setting: T = 400, 50 x 50 grid) the acceptance
    bands against its ET-GP-UCB numbers, each `{name, holds, detail}`. A W-DBO row (an outside
    anchor, not in the paper) is reported in the table but takes no part in these claims."""
    checks = []
    mains = [c for c in summary if c["group"] == "main"]
    if mains:
        pairs = [(c["eps"], _find(summary, "main", c["eps"], "et-gp-ucb"),
                  _find(summary, "main", c["eps"], "r-gp-ucb")) for c in mains]
        checks.append({"name": "ET-GP-UCB beats R-GP-UCB at every eps",
                       "holds": all(et["R_T_mean"] < r["R_T_mean"] for _, et, r in pairs),
                       "detail": "; ".join(f"eps={e:g}: {et['R_T_mean']:.1f} vs {r['R_T_mean']:.1f}"
                                           for e, et, r in pairs)})
        best = [(c["eps"], min((a for a in c["algorithms"] if a["strategy"] != wdbo.STRATEGY),
                               key=lambda a: a["R_T_mean"])) for c in mains]
        checks.append({"name": "TV-GP-UCB with the true eps is best (main cases)",
                       "holds": all(a["strategy"] == "tv-gp-ucb" for _, a in best),
                       "detail": "; ".join(f"eps={e:g}: best {a['label']} {a['R_T_mean']:.1f}"
                                           for e, a in best)})
        robust = [(c["eps"], next((a for a in c["algorithms"]
                                   if a["params"].get("trigger") == "robust"), None)) for c in mains]
        robust = [(e, r, et) for (e, r), (_, et, _) in zip(robust, pairs) if r is not None]
        if robust:
            checks.append({
                "name": "the robust trigger is within 10 % of the paper's (or better) at every eps",
                "holds": all(r["R_T_mean"] <= 1.1 * et["R_T_mean"] for _, r, et in robust),
                "detail": "; ".join(f"eps={e:g}: robust {r['R_T_mean']:.1f} vs paper "
                                    f"{et['R_T_mean']:.1f}" for e, r, et in robust)})
        if (horizon, grid) == (PAPER_HORIZON, GRID):
            checks += [_acceptance(e, et) for e, et, _ in pairs]
    case = next((c for c in summary if c["group"] == "misspecified"), None)
    if case is not None:
        tv, r = (_find(summary, "misspecified", MISSPEC_EPS, s) for s in ("tv-gp-ucb", "r-gp-ucb"))
        for et in (a for a in case["algorithms"] if a["strategy"] == "et-gp-ucb"):
            checks.append({"name": f"misspecified eps: {et['label']} beats TV-GP-UCB and R-GP-UCB",
                           "holds": et["R_T_mean"] < min(tv["R_T_mean"], r["R_T_mean"]),
                           "detail": f"ET {et['R_T_mean']:.1f}, {tv['label']} "
                                     f"{tv['R_T_mean']:.1f}, {r['label']} {r['R_T_mean']:.1f}"})
    return checks


def _acceptance(eps: float, et: dict) -> dict:
    """ET-GP-UCB mean R_T at most +10 % (lower is fine), mean resets within +-30 % of the paper."""
    p = et["paper"]
    dr = et["R_T_mean"] / p["R_T"] - 1.0
    dn = et["resets_mean"] / p["resets"] - 1.0
    return {"name": f"acceptance eps={eps:g}: ET-GP-UCB R_T <= paper +10 %, resets +-30 %",
            "holds": bool(dr <= RT_TOLERANCE and abs(dn) <= RESETS_TOLERANCE),
            "detail": f"R_T {et['R_T_mean']:.2f} vs {p['R_T']} ({dr:+.1%}); resets "
                      f"{et['resets_mean']:.2f} vs {p['resets']} ({dn:+.1%})"}


def format_table(summary: list[dict], runs: int, horizon: int, grid: int = GRID) -> str:
    lines = [f"Within-model benchmark: {runs} runs, T = {horizon}, grid {grid}x{grid}, "
             f"beta_t = {BETA_C1:g} ln({BETA_C2:g} t), noise variance {NOISE_VARIANCE:g}",
             f"{'case':<28} {'algorithm':<26} {'R_T mean +- std':>18} {'resets':>7}"
             f" {'paper R_T':>10} {'paper resets':>13}"]
    for case in summary:
        for a in case["algorithms"]:
            p = a["paper"]
            paper = f"{p['R_T']:>10.2f} {p['resets']:>13.2f}" if p else f"{'-':>10} {'-':>13}"
            rt = f"{a['R_T_mean']:.2f} +- {a['R_T_std']:.2f}"
            lines.append(f"{case['case']:<28} {a['label']:<26} {rt:>18} {a['resets_mean']:>7.2f} "
                         f"{paper}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=50, help="runs per case (default 50)")
    sweep.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--horizon", type=int, default=400, help="steps T per run (default 400)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/within-model"),
                        help="directory for results.json and the PNG plots")
    parser.add_argument("--cases", type=_parse_cases, default=CASE_GROUPS,
                        help=f"comma list of {','.join(CASE_GROUPS)} (default all)")
    parser.add_argument("--grid", type=int, default=GRID,
                        help=f"grid points per axis (default {GRID}, the paper's; less for tests)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-wdbo", action="store_true",
                        help="leave out the W-DBO rows (run when the anchors extra is installed)")


def _parse_cases(text: str) -> tuple[str, ...]:
    return sweep.comma_list(text, CASE_GROUPS, "case")


def run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.horizon < 2 or args.workers < 1 or args.grid < 2:
        print("--runs and --workers must be >= 1, --horizon and --grid >= 2", file=sys.stderr)
        return 2
    cases = build_cases(tuple(args.cases))
    if wdbo.rows(not args.no_wdbo and "main" in args.cases):
        cases = with_wdbo(cases)
    results, outcome = execute(cases, args)
    if outcome.failures:
        return 1
    summary = summarize(cases, results, args.horizon)
    checks = check_claims(summary, args.horizon, args.grid)
    print(format_table(summary, args.runs, args.horizon, args.grid))
    print()
    print(pr.format_claims(checks))
    if (args.runs, args.horizon, args.grid) != (50, PAPER_HORIZON, GRID):
        print("(the paper's setting is 50 runs, T = 400, a 50 x 50 grid: this smaller run is a "
              "smoke test, its claims check only indicative)")
    doc = {"config": {"runs": args.runs, "horizon": args.horizon, "seed": args.seed,
                      "workers": args.workers, "grid": args.grid, "lengthscale": LENGTHSCALE,
                      "noise_variance": NOISE_VARIANCE, "beta": [BETA_C1, BETA_C2],
                      "delta_b": DELTA_B, "sampler_jitter": SAMPLER_JITTER,
                      "cases": list(args.cases),
                      "wdbo": wdbo.note_versions() if cases != build_cases(tuple(args.cases))
                      else None},
           "wall_time_s": round(outcome.wall_s, 2), "cases": summary, "claims": checks}
    return sweep.finish(args, outcome, doc,
                        lambda: plots.within_model_figures(summary, args.horizon, args.out))
