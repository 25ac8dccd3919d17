"""`tvbod bench latency --cartpole-step`: the shipped cart-pole optimizer's step, tell + MAP refit +
next proposal, at dataset sizes n, and the refit's share of it.

The optimizer is `configs/plants/cartpole.yaml`'s, as the daemon loads it, with the seed set; the
plant is the cart-pole at constant nominal friction (no change: D grows by one point a step, the
trigger firing only by a false alarm, which the table would show as a dataset smaller than n).
The strategy is stepped (ask, plant episode, tell) until D holds n points; from a copy of it,
`warmup` untimed and then `calls` timed steps follow, each `tell(x, y) + ask()` (`perf_counter`),
with the refit inside the tell timed on its own, and the step's process CPU time (`process_time`:
less sensitive to a shared machine's load than wall time). Plants per core = 1 s / the step's
CPU p50 (one step per second each; on an idle core wall and CPU time agree). One BLAS
thread (the latency bench's pinned child). Results: docs/benchmarks.md, *The core*.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

PLANT_FILE = Path(__file__).resolve().parents[2] / "configs" / "plants" / "cartpole.yaml"
SIZES = (50, 150, 300)


#: `--refit legacy`: tvbod 0.2's refit, bit for bit (its objective evaluation, no skip): fixed
#: settings of behaviour version 2 (`tvbod.core.behaviours`), replacing the shipped version's.
LEGACY_REFIT = {"hyperparameters.objective": "explicit-inverse",
                "hyperparameters.refit_tolerance": 0.0}


def shipped_strategy(seed: int = 0, refit: str = "shipped", polish: str | None = None,
                     tolerance: float | None = None):
    """The shipped cart-pole optimizer (`PLANT_FILE`'s `optimizer:`), seeded; `refit: legacy`
    with `LEGACY_REFIT` in its `hyperparameters` (the "before" of docs/benchmarks.md); `polish`
    and `tolerance` override its `budget.polish` (e.g. `newton`, the opt-in Newton polish) and
    the fixed setting `budget.tolerance`."""
    from tvbod.core import make_strategy, parse_spec
    from tvbod.service.config import load_plant_config

    mapping = {**load_plant_config(PLANT_FILE).optimizer_mapping, "seed": seed}
    settings = dict(LEGACY_REFIT) if refit == "legacy" else {}
    if tolerance is not None:
        settings["budget.tolerance"] = tolerance
    if polish is not None:
        mapping["budget"] = {**mapping.get("budget", {}), "polish": polish}
    return make_strategy(parse_spec(mapping, settings))


class _Episodes:
    """The cart-pole at nominal friction with a failed episode told as the daemon's default
    failure policy would (posterior mean + 3 sd, worse side: a cost)."""

    def __init__(self, seed: int) -> None:
        from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, FrictionProfile

        params = CartPoleParams()
        self.plant = CartPolePlant(params, FrictionProfile.constant(params.friction), seed)
        self.t = 0

    def measure(self, strategy, x) -> float:
        self.t += 1
        ev = self.plant.evaluate(x, self.t)
        if ev.failed:
            mean, std = strategy.predict(x)
            return float(mean + 3.0 * std)
        return float(ev.cost)


def _timed_refits(strategy) -> list[tuple[float, float]]:
    """Record `(wall, CPU)` seconds of every `_refit_hyperparameters` call of this instance."""
    seconds: list[tuple[float, float]] = []
    refit = strategy._refit_hyperparameters

    def timed(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return refit(*args, **kwargs)
        finally:
            seconds.append((time.perf_counter() - t0, time.process_time() - c0))

    strategy._refit_hyperparameters = timed
    return seconds


def _time_steps(base, episodes: _Episodes, calls: int, warmup: int) -> dict:
    s, ep = copy.deepcopy(base), copy.deepcopy(episodes)
    x = s.ask()
    refits = _timed_refits(s)
    steps, cpu, refit_s, refit_cpu, asks = [], [], [], [], []
    for k in range(warmup + calls):
        y = ep.measure(s, x)
        del refits[:]
        t0, c0 = time.perf_counter(), time.process_time()
        s.tell(x, y)
        t1, told = time.perf_counter(), len(refits)
        x = s.ask()
        if k >= warmup:
            steps.append(time.perf_counter() - t0)
            asks.append(time.perf_counter() - t1 - sum(w for w, _ in refits[told:]))
            cpu.append(time.process_time() - c0)
            refit_s.append(sum(w for w, _ in refits))
            refit_cpu.append(sum(c for _, c in refits))
    return {"steps": steps, "cpu": cpu, "refits": refit_s, "refit_cpu": refit_cpu, "asks": asks}


def measure(st: dict, percentiles, log=lambda msg: None) -> dict:
    """Step timings at each size of `st["sizes"]` (default `SIZES`), one strategy grown through
    them; `percentiles` turns seconds into the latency bench's `{p50, p99, ...}` in ms."""
    import numpy as np

    sizes = sorted(st.get("step_sizes") or SIZES)
    refit = st.get("refit") or "shipped"
    strategy = shipped_strategy(st["seed"], refit, st.get("polish"), st.get("tolerance"))
    episodes = _Episodes(st["seed"])
    x, rows = strategy.ask(), []
    for n in sizes:
        while strategy.t <= n:  # after n tells D holds n points (unless the trigger fired)
            strategy.tell(x, episodes.measure(strategy, x))
            x = strategy.ask()
        t0 = time.perf_counter()
        r = _time_steps(strategy, episodes, st["calls"], st["warmup"])
        step_ms, refit_ms = percentiles(r["steps"]), percentiles(r["refits"])
        cpu_ms = percentiles(r["cpu"])
        rows.append({"n": n, "dataset_size": int(strategy.gp.n), "step_ms": step_ms,
                     "step_cpu_ms": cpu_ms, "refit_ms": refit_ms,
                     "refit_cpu_ms": percentiles(r["refit_cpu"]),
                     "ask_ms": percentiles(r["asks"]),
                     "refit_share": float(np.sum(r["refits"]) / np.sum(r["steps"])),
                     "refit_cpu_share": float(np.sum(r["refit_cpu"]) / np.sum(r["cpu"])),
                     "plants_per_core": 1000.0 / cpu_ms["p50"]})
        log(f"cart-pole step n={n}: {time.perf_counter() - t0:.1f} s")
    return {"plant_file": str(PLANT_FILE.name), "refit": refit,
            "polish": strategy.budget.polish, "tolerance": strategy.budget.tolerance, "rows": rows}


def format_table(result: dict, calls: int, warmup: int) -> str:
    head = ["n", "points in D", "step p50 ms", "step p99 ms", "step CPU p50 ms", "refit p50 ms",
            "refit CPU p50 ms", "refit share (CPU)", "ask p50 ms (no refit)",
            "plants per core (1 s / CPU p50)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in result["rows"]:
        lines.append("| " + " | ".join([
            str(r["n"]), str(r["dataset_size"]), f"{r['step_ms']['p50']:.2f}",
            f"{r['step_ms']['p99']:.2f}", f"{r['step_cpu_ms']['p50']:.2f}",
            f"{r['refit_ms']['p50']:.2f}", f"{r['refit_cpu_ms']['p50']:.2f}",
            f"{r['refit_share']:.0%} ({r['refit_cpu_share']:.0%})", f"{r['ask_ms']['p50']:.2f}",
            f"{r['plants_per_core']:.0f}"]) + " |")
    lines.append(f"\nCart-pole step (tell + MAP refit + ask) of {result['plant_file']}'s optimizer "
                 f"(refit: {result['refit']}, polish: {result.get('polish', 'lbfgsb-joint')}, "
                 f"tolerance: {result.get('tolerance', 'SciPy default')}), "
                 f"{calls} timed steps after {warmup} warm-up per row; one BLAS thread; "
                 "ask: the proposal after the tell (screen, polish), without the refit the ask settles.")
    lines += goal_lines(result)
    return "\n".join(lines)


#: The goal for the step at n = 300: p50 (ms) and plants per core.
GOAL_N, GOAL_STEP_MS, GOAL_PLANTS = 300, 15.0, 70


def goal_lines(result: dict) -> list[str]:
    row = next((r for r in result["rows"] if r["n"] == GOAL_N), None)
    text = f"goal cart-pole step p50 <= {GOAL_STEP_MS:g} ms and >= {GOAL_PLANTS} plants per core at n={GOAL_N}"
    if row is None:
        return [f"{text}: not measured (add --sizes {GOAL_N})"]
    ok = row["step_ms"]["p50"] <= GOAL_STEP_MS and row["plants_per_core"] >= GOAL_PLANTS
    return [f"{text}: {'met' if ok else 'MISSED'} ({row['step_ms']['p50']:.1f} ms, "
            f"{row['plants_per_core']:.0f} plants per core; the lead measures it idle)"]
