"""Shared machinery of the plant benchmarks (`tvbod bench cartpole | temperature`).

Both compare ET-GP-UCB with GP-UCB, R-GP-UCB, TV-GP-UCB and UI-TVBO, every algorithm on the same
plant realisation per run (common random numbers). One task is one (run, algorithm) pair; tasks
run on the sweep executor (`tvbod.bench.sweep`). This module holds what the two have in common:
the algorithm list, the per-algorithm summary, the ET-GP-UCB detection-delay statistics, the
tables and the plots.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: Heaviest first (GP-UCB, TV-GP-UCB, UI-TVBO keep every point) so the pool ends together.
_COST_ORDER = ("gp-ucb", "ui-tvbo", "tv-gp-ucb", "et-gp-ucb", "r-gp-ucb")


@dataclass(frozen=True)
class Algo:
    """One optimizer: its table label, the core strategy name and the strategy's own spec keys."""

    label: str
    strategy: str
    params: tuple[tuple[str, float | str], ...] = ()


def five_algorithms(period: int, forgetting: float, drift: float) -> tuple[Algo, ...]:
    """ET-GP-UCB (the robust default trigger, then the paper's trigger), GP-UCB, R-GP-UCB
    (`N = period`), TV-GP-UCB (`eps = forgetting`), UI-TVBO (`sigma_w^2 = drift`), in table order."""
    return (
        Algo("ET-GP-UCB", "et-gp-ucb"),
        Algo("ET-GP-UCB (paper trigger)", "et-gp-ucb", (("trigger", "paper"),)),
        Algo("GP-UCB", "gp-ucb"),
        Algo(f"R-GP-UCB (N={period})", "r-gp-ucb", (("reset_period", period),)),
        Algo(f"TV-GP-UCB (eps={forgetting:g})", "tv-gp-ucb", (("forgetting", forgetting),)),
        Algo(f"UI-TVBO (sigma_w^2={drift:g})", "ui-tvbo", (("drift_variance", drift),)),
    )


def with_grid(rows: Sequence[Algo], periods: Sequence[int], forgettings: Sequence[float],
              drifts: Sequence[float]) -> tuple[Algo, ...]:
    """`rows` plus every time-varying baseline over a grid (R-GP-UCB's `N`, TV-GP-UCB's `eps`,
    UI-TVBO's `sigma_w^2`; an oracle a user would not have), skipping rows already present."""
    grid = ([Algo(f"R-GP-UCB (N={n})", "r-gp-ucb", (("reset_period", n),)) for n in periods]
            + [Algo(f"TV-GP-UCB (eps={e:g})", "tv-gp-ucb", (("forgetting", e),)) for e in forgettings]
            + [Algo(f"UI-TVBO (sigma_w^2={w:g})", "ui-tvbo", (("drift_variance", w),)) for w in drifts])
    seen = {a.label for a in rows}
    return tuple(rows) + tuple(a for a in grid if a.label not in seen)


#: An `Algo` param naming the shipped plant file a row's optimizer is read from
#: (`shipped_spec`); it is not a strategy key.
SHIPPED = "shipped"


def shipped_algo(label: str, plant_file: str) -> Algo:
    """The row "ET-GP-UCB as shipped": the optimizer of `configs/plants/<plant_file>.yaml`."""
    return Algo(label, "et-gp-ucb", ((SHIPPED, plant_file),))


def shipped_mapping(plant_file: str) -> dict:
    """The parsed `optimizer:` mapping of the shipped `configs/plants/<plant_file>.yaml`, as the
    daemon loads it (defaults filled in, side files read, domain and sense from the plant level)."""
    return copy.deepcopy(_shipped_mapping(plant_file))


@lru_cache(maxsize=None)
def _shipped_mapping(plant_file: str) -> dict:
    from tvbod.resources import shipped
    from tvbod.service.config import load_plant_config

    path = Path(str(shipped(f"configs/plants/{plant_file}.yaml")))
    return load_plant_config(path).optimizer_mapping


def shipped_spec(algo: Algo, seed: int, **replace) -> dict:
    """A shipped row's optimizer mapping: the shipped file's, with the run's `seed` and only the
    keys in `replace` (what the bench must change: e.g. the domain of another plant) replaced."""
    return {**shipped_mapping(dict(algo.params)[SHIPPED]), "seed": seed, **replace}


def range_map(costs) -> dict:
    """`{offset, scale, cost_min, cost_max, points}` mapping the finite `costs`' range onto
    `[-2, 2]` (the fixed measurement map of the paper-setting rows)."""
    costs = np.asarray(costs, dtype=float)
    costs = costs[np.isfinite(costs)]
    lo, hi = float(costs.min()), float(costs.max())
    return {"offset": (hi + lo) / 2.0, "scale": (hi - lo) / 4.0 or 1.0, "cost_min": lo,
            "cost_max": hi, "points": int(costs.size)}


def oracle_best(summary: list[dict]) -> dict[str, dict]:
    """Per time-varying baseline strategy, its row with the lowest mean R_T."""
    best: dict[str, dict] = {}
    for a in summary:
        if a["strategy"] in ("r-gp-ucb", "tv-gp-ucb", "ui-tvbo") and (
                a["strategy"] not in best or a["R_T_mean"] < best[a["strategy"]]["R_T_mean"]):
            best[a["strategy"]] = a
    return best


def oracle_check(summary: list[dict], plant: str, margin: float) -> dict:
    """Claim: the first row's mean R_T is within `margin` of, or below, every time-varying
    baseline at its best setting of the grid."""
    et, best = summary[0], oracle_best(summary)
    worst = max(et["R_T_mean"] / b["R_T_mean"] for b in best.values())
    detail = ", ".join(f"{b['label']} {b['R_T_mean']:.2f}" for b in best.values())
    return {"name": f"{plant}: {et['label']} within {margin:.0%} of or below every oracle-tuned "
                    "baseline",
            "holds": bool(worst <= 1.0 + margin),
            "detail": f"{et['label']} {et['R_T_mean']:.2f} vs best of grid: {detail} "
                      f"(largest ratio {worst:.3f})"}


def select(algos: Sequence[Algo], names: Sequence[str] | None) -> tuple[Algo, ...]:
    """The algorithms whose strategy name is in `names` (all if None), in table order."""
    return tuple(a for a in algos if names is None or a.strategy in names)


def run_seed(seed: int, run: int) -> int:
    """The per-run seed shared by the plant realisation and every strategy of that run."""
    return int(np.random.SeedSequence([seed, run]).generate_state(1, np.uint32)[0])


def sweep_rows(run_task, algos: Sequence[Algo], args, cfg, name: str,
               row_extras: Callable[[list[dict]], dict]):
    """Every (run, row) task of a plant bench on the sweep executor, seeded by (seed, run) only
    (every row sees the same plant realisation); `(the sweep's outcome, the rows' summary)`, each
    row extended by `row_extras(its task results in run order)`, or None if a task failed (the
    executor has reported it)."""
    from . import sweep

    tasks = [sweep.task(run_task, r, a, args.seed, cfg, seed=run_seed(args.seed, r),
                        rank=cost_rank(a)) for r in range(args.runs) for a in algos]
    outcome = sweep.run(tasks, args, name)
    if outcome.failures:
        return None
    results = outcome.ordered(tasks)
    summary = summarize(algos, results, args.runs, args.horizon)
    for a in summary:
        a.update(row_extras(sorted((r for r in results if r["label"] == a["label"]),
                                   key=lambda r: r["run"])))
    return outcome, summary


def cost_rank(algo: Algo) -> int:
    """Submission rank of one algorithm's tasks: heaviest first, so a sweep's last tasks finish
    together (the order never changes a result)."""
    return _COST_ORDER.index(algo.strategy) if algo.strategy in _COST_ORDER else 0


# ---------------------------------------------------------------------- statistics
def binomial_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval for a rate of `k` in `n` (exact, conservative)."""
    from scipy.stats import beta

    if n == 0:
        return (0.0, 1.0)
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return (round(lo, 4), round(hi, 4))


def detection_stats(reset_times: Sequence[Sequence[int]], t0: int, window: int) -> dict:
    """ET-GP-UCB's reaction to a change at step `t0`, over runs (`reset_times[r]`: steps, sorted).

    `delay = (first reset at t >= t0) - t0` (0: caught at the first measurement after the change);
    a run without a reset at `t >= t0` has no delay and counts as undetected. `within_window` counts
    delays `<= window`; `false_resets` counts resets at `t < t0` (all runs), `runs_with_false`
    the runs that have any."""
    delays = []
    for times in reset_times:
        after = [t for t in times if t >= t0]
        if after:
            delays.append(min(after) - t0)
    false = [sum(1 for t in times if t < t0) for times in reset_times]
    within = sum(1 for d in delays if d <= window)
    counts = [len(times) for times in reset_times]
    return {
        "within_ci95": binomial_ci(within, len(reset_times)),
        "runs_over_10_resets": sum(1 for c in counts if c > 10),
        "max_resets": max(counts) if counts else 0,
        "t0": t0, "window": window, "runs": len(reset_times), "delays": delays,
        "detected": len(delays), "within_window": sum(1 for d in delays if d <= window),
        "median_delay": float(np.median(delays)) if delays else None,
        "min_delay": min(delays) if delays else None,
        "max_delay": max(delays) if delays else None,
        "false_resets": int(sum(false)), "runs_with_false": sum(1 for f in false if f),
    }


def summarize(algos: Sequence[Algo], results: list[dict], runs: int, horizon: int) -> list[dict]:
    """Per algorithm: `R_T` mean and std (ddof 0) over runs, resets, mean and s.e.m. of `R_t / t`,
    and the per-run regret sequences and reset steps (for the plots and results.json)."""
    t = np.arange(1, horizon + 1)
    by = {(r["label"], r["run"]): r for r in results}
    out = []
    for a in algos:
        per_run = [by[(a.label, k)] for k in range(runs)]
        regret = np.array([r["regret"] for r in per_run])
        R = regret.sum(axis=1)
        curves = np.cumsum(regret, axis=1) / t
        resets = np.array([len(r["reset_times"]) for r in per_run])
        out.append({
            "label": a.label, "strategy": a.strategy, "params": dict(a.params),
            "R_T_mean": float(R.mean()), "R_T_std": float(R.std()),
            "R_T_median": float(np.median(R)),
            "resets_mean": float(resets.mean()), "resets_std": float(resets.std()),
            "failures": int(sum(r.get("failures", 0) for r in per_run)),
            "cpu_s_mean": float(np.mean([r["cpu_s"] for r in per_run])),
            "R_T": R.round(4).tolist(), "resets": resets.tolist(),
            "reset_times": [r["reset_times"] for r in per_run],
            "realisation": [r["realisation"] for r in per_run],
            "mean_R_t_over_t": curves.mean(axis=0).round(5).tolist(),
            "sem_R_t_over_t": (curves.std(axis=0) / math.sqrt(runs)).round(5).tolist(),
            "regret": regret.round(6).tolist(),
        })
    return out


def same_realisation(summary: list[dict]) -> bool:
    """Every algorithm saw the same plant realisation in every run (the fingerprints agree)."""
    first = summary[0]["realisation"]
    return all(a["realisation"] == first for a in summary[1:])


def wins(summary: list[dict]) -> dict[str, int]:
    """Per algorithm label: in how many runs its `R_T` was the lowest of all (ties to each)."""
    R = np.array([a["R_T"] for a in summary])  # (algorithms, runs)
    best = R.min(axis=0)
    return {a["label"]: int(np.sum(R[i] == best)) for i, a in enumerate(summary)}


def lowest_regret_check(summary: list[dict], plant: str) -> dict:
    """Claim: the first ET-GP-UCB row has a lower mean cumulative regret than every baseline.
    The detail adds the medians and in how many runs ET-GP-UCB was the best (not tested)."""
    et = next(a for a in summary if a["strategy"] == "et-gp-ucb")
    rest = [a for a in summary if a["strategy"] != "et-gp-ucb"]  # the baselines
    best = min(rest, key=lambda a: a["R_T_mean"])
    holds = et["R_T_mean"] < best["R_T_mean"]  # strictly: a tie is not "the lowest"
    others = ", ".join(f"{a['label']} {a['R_T_mean']:.2f}" for a in rest)
    medians = ", ".join(f"{a['label'].split(' ')[0]} {a['R_T_median']:.2f}" for a in summary)
    return {"name": f"{plant}: {et['label']} has a lower mean cumulative regret than every baseline",
            "holds": bool(holds),
            "detail": f"mean R_T: ET-GP-UCB {et['R_T_mean']:.2f} vs {others}"
                      + ("" if holds else f" (lowest other: {best['label']})")
                      + f"; medians: {medians}; ET-GP-UCB lowest in "
                        f"{wins(summary)[et['label']]}/{len(et['R_T'])} runs"}


# ---------------------------------------------------------------------- text
def format_table(summary: list[dict], header: str) -> str:
    w = wins(summary)
    lw = max([26, *(len(a["label"]) for a in summary)])
    lines = [header, f"{'algorithm':<{lw}} {'R_T mean +- std':>20} {'R_T median':>11} "
                     f"{'best in':>8} {'resets mean':>12} {'failures':>9} {'cpu s/run':>10}"]
    for a in summary:
        rt = f"{a['R_T_mean']:.2f} +- {a['R_T_std']:.2f}"
        lines.append(f"{a['label']:<{lw}} {rt:>20} {a['R_T_median']:>11.2f} {w[a['label']]:>8d} "
                     f"{a['resets_mean']:>12.2f} {a['failures']:>9d} {a['cpu_s_mean']:>10.2f}")
    return "\n".join(lines)


def format_detection(d: dict, label: str = "ET-GP-UCB") -> str:
    if not d["detected"]:
        delay = "no reset at or after the change in any run"
    else:
        lo, hi = d["within_ci95"]
        delay = (f"delay median {d['median_delay']:g} steps, range "
                 f"{d['min_delay']}..{d['max_delay']}"
                 f" (detected in {d['detected']}/{d['runs']} runs, within {d['window']} steps in "
                 f"{d['within_window']}/{d['runs']}, 95% CI {lo:.0%}..{hi:.0%})")
    return (f"{label} detection of the change at t = {d['t0']}: {delay}; false resets before "
            f"t = {d['t0']}: {d['false_resets']} in {d['runs_with_false']}/{d['runs']} runs; "
            f"runs with > 10 resets: {d['runs_over_10_resets']}, most resets in a run: "
            f"{d['max_resets']}")


def format_claims(checks: list[dict]) -> str:
    return "\n".join(f"[{'holds' if c['holds'] else 'does not hold'}] {c['name']}: {c['detail']}"
                     for c in checks)


# ---------------------------------------------------------------------- plots
def figures(summary: list[dict], horizon: int, out: Path, title: str,
            change_at: int | None = None) -> list[Path]:
    """`regret.png`, three panels of `R_t / t` per algorithm: the mean over runs +- s.e.m. with a
    rug of every ET-GP-UCB reset of every run; the median over runs (robust to a runaway run); and
    run 0 with a marker at each of the algorithm's resets. `resets.png`: every reset of every run
    (one row per run, per resetting algorithm). A dashed line marks `change_at`."""
    from . import plots

    t = np.arange(1, horizon + 1)
    runs = len(summary[0]["R_T"])
    fig, (mean_ax, median_ax, run_ax) = plots.panel_grid(3, ncols=3, size=(4.6, 3.6))
    for a in summary:
        m, s = np.array(a["mean_R_t_over_t"]), np.array(a["sem_R_t_over_t"])
        (line,) = mean_ax.plot(t, m, lw=1.3, label=a["label"])
        color = line.get_color()
        mean_ax.fill_between(t, m - s, m + s, color=color, alpha=0.2, lw=0)
        curves = np.cumsum(np.array(a["regret"]), axis=1) / t
        median_ax.plot(t, np.median(curves, axis=0), lw=1.3, color=color, label=a["label"])
        run_ax.plot(t, curves[0], lw=1.1, color=color, label=a["label"])
        times = np.array(a["reset_times"][0], dtype=int)
        if times.size:
            run_ax.plot(times, curves[0][times - 1], "o", ms=3.5, mfc="none", color=color)
        if a["strategy"] == "et-gp-ucb":
            rug = [x for r in a["reset_times"] for x in r]
            mean_ax.plot(rug, np.full(len(rug), -0.03 * float(np.max(m))), "|", ms=6, alpha=0.4,
                         color=color, label=f"{a['label']}: resets (all runs)")
    for ax, name in ((mean_ax, f"{title}: mean over {runs} runs"),
                     (median_ax, f"{title}: median over {runs} runs"),
                     (run_ax, f"{title}: run 0, o = reset")):
        if change_at is not None:
            ax.axvline(change_at, color="k", ls="--", lw=0.8)
        ax.set(title=name, xlabel="t", ylabel="R_t / t", xlim=(1, horizon))
        ax.legend(fontsize=6)
    paths = [plots.save(fig, out / "regret.png")]
    if any(sum(a["resets"]) for a in summary):
        fig, (ax,) = plots.panel_grid(1, size=(6.4, 4.2))
        plots._reset_raster(ax, {"case": title, "algorithms": summary}, horizon)
        if change_at is not None:
            ax.axvline(change_at, color="k", ls="--", lw=0.8)
        paths.append(plots.save(fig, out / "resets.png"))
    return paths
