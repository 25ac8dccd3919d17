"""Per-cell statistics of the suite and its markdown tables (one per split).

A cell is (plant, drift kind, row). Its runs' statistics: mean cumulative regret with a 95 %
Student-t interval; for a drift with an abrupt change, the share of runs reset within `WINDOW`
steps of the (first) change with its Clopper-Pearson interval, and the median delay; false-reset
runs (a reset before the drift starts; on a `none` plant any reset); runs with more than 10
resets and the most resets in a run (the reset statistics for event-triggered rows only: R-GP-UCB
resets on a clock); catastrophic episodes and, on box plants, threshold violations (episodes
whose noise-free cost exceeds the safe rows' threshold) per 1,000 episodes; CPU milliseconds per
step; the
number of distinct trajectories among the runs (distinct proposal sequences).
"""

from __future__ import annotations

import math

import numpy as np

from .. import plant_runs as pr
from . import algorithms as al

WINDOW = 5
COLUMNS = ("plant", "drift", "algorithm", "R_T mean [95% CI]", f"caught <= {WINDOW} steps [CP 95%]",
           "median delay", "false-reset runs", "runs > 10 resets", "most resets",
           "catastrophic episodes", "violations /1000", "CPU ms/step", "distinct trajectories")


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """`(mean, low, high)`: the Student-t interval of the mean (NaN bounds for one run)."""
    from scipy.stats import t as student

    v = np.asarray(values, dtype=float)
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    h = float(student.ppf(0.5 + level / 2.0, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - h, m + h


def cell(plant: str, drift, algo: pr.Algo, role: str, results: list[dict], horizon: int,
         drift_start: int) -> dict:
    """The statistics of one cell from its task results (one per run)."""
    runs = sorted(results, key=lambda r: r["run"])
    (summary,) = pr.summarize([algo], runs, len(runs), horizon)
    none = drift.kind == "none"
    t0 = horizon + 1 if none else drift_start
    false = pr.detection_stats(summary["reset_times"], t0, WINDOW)
    changes = drift.change_steps()
    caught = (pr.detection_stats(summary["reset_times"], changes[0], WINDOW) if changes else None)
    mean, lo, hi = mean_ci(summary["R_T"])
    if algo.strategy != "et-gp-ucb":  # no trigger: R-GP-UCB resets on a clock, others never
        caught = None
        false = dict.fromkeys(("runs_with_false", "false_resets", "runs_over_10_resets",
                               "max_resets"))
    return {
        "plant": plant, "drift": drift.kind, "label": algo.label, "strategy": algo.strategy,
        "params": dict(algo.params), "role": role, "runs": len(runs),
        "on_grid_edge": role == "oracle" and al.on_grid_edge(algo),
        "R_T_mean": mean, "R_T_ci95": [lo, hi], "R_T": summary["R_T"],
        "resets": summary["resets"], "reset_times": summary["reset_times"],
        "change_steps": list(changes),
        "caught": None if caught is None else caught["within_window"],
        "caught_ci95": None if caught is None else caught["within_ci95"],
        "median_delay": None if caught is None else caught["median_delay"],
        "false_reset_runs": false["runs_with_false"], "false_resets": false["false_resets"],
        "runs_over_10_resets": false["runs_over_10_resets"], "max_resets": false["max_resets"],
        "catastrophic": int(sum(r["catastrophic"] for r in runs)),
        "violations_per_1000": _per_1000([r.get("violations") for r in runs], horizon),
        "cpu_ms_per_step": 1000.0 * summary["cpu_s_mean"] / horizon,
        "distinct_trajectories": len({r["trajectory"] for r in runs}),
    }


def _per_1000(counts: list, horizon: int) -> float | None:
    """Violations per 1,000 episodes over the runs (None where runs have no threshold)."""
    if not counts or any(c is None for c in counts):
        return None
    return 1000.0 * sum(counts) / (horizon * len(counts))


def shown(cells: list[dict]) -> list[dict]:
    """The table's rows: every `row` cell, and per (plant, drift, strategy) the best oracle cell."""
    best: dict = {}
    for c in cells:
        if c["role"] == "oracle":
            key = (c["plant"], c["drift"], c["strategy"])
            if key not in best or c["R_T_mean"] < best[key]["R_T_mean"]:
                best[key] = c
    out = [c for c in cells if c["role"] == "row" or best.get(
        (c["plant"], c["drift"], c["strategy"])) is c]
    return out


def _label(c: dict) -> str:
    if c["role"] != "oracle":
        return c["label"]
    return c["label"] + " oracle" + (" **best at the grid's edge**" if c["on_grid_edge"] else "")


def _fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table(cells: list[dict], split: str, runs: int, horizon: int) -> str:
    """The markdown table of one split's cells (its caption names the split)."""
    lines = [f"**Split: {split}** ({runs} runs per cell, T = {horizon}; regret summed over the "
             f"run; caught: a reset within {WINDOW} steps of the first change)", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for c in shown(cells):
        lo, hi = c["R_T_ci95"]
        caught = "-" if c["caught"] is None else (
            f"{c['caught']}/{c['runs']} [{c['caught_ci95'][0]:.0%}, {c['caught_ci95'][1]:.0%}]")
        lines.append("| " + " | ".join([
            c["plant"], c["drift"], _label(c),
            f"{_fmt(c['R_T_mean'])} [{_fmt(lo)}, {_fmt(hi)}]", caught, _fmt(c["median_delay"], "g"),
            "-" if c["false_reset_runs"] is None else f"{c['false_reset_runs']}/{c['runs']}",
            _fmt(c["runs_over_10_resets"], "d"), _fmt(c["max_resets"], "d"), str(c["catastrophic"]),
            _fmt(c.get("violations_per_1000"), ".1f"), _fmt(c["cpu_ms_per_step"], ".1f"),
            f"{c['distinct_trajectories']}/{c['runs']}"]) + " |")
    if len(lines) == 4:
        empty = ["(no cell of this split was run)"] + [""] * (len(COLUMNS) - 1)
        lines.append("| " + " | ".join(empty) + " |")
    return "\n".join(lines)
