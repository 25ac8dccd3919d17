"""The suite's rows and the optimizer mapping of each on each plant.

- `et-shipped`: the shipped plant file's optimizer (`configs/plants/<plant>.yaml` where the plant
  has one, else the shipped cart-pole file's with only the box replaced);
- `et-bounds`: a plant file that names only its parameters' bounds and
  `optimizer: {strategy: et-gp-ucb}` (every other key at its default), as the daemon reads it;
- `et-safe`, `gp-ucb-safe`: the bounds-only file plus `safety:` (`safety_for`: the box's centre
  as the safe seed, the threshold one gain set in ten of the box exceeds), with ET-GP-UCB (an
  event trigger, a safe set and a backup controller on a reset: ETSO's design) and with GP-UCB
  (safe, no trigger);
- `et-paper`, `gp-ucb`, `r-gp-ucb`, `tv-gp-ucb`, `ui-tvbo`: the paper's settings, on a fixed
  measurement map (the plant's nominal noise-free cost range onto [-2, 2]);
- `oracle`: R-GP-UCB, TV-GP-UCB and UI-TVBO over a grid (an oracle a user would not have);
- `wdbo`: W-DBO where installed (box plants).

On the project's cart-pole and the temperature data the paper-setting rows are exactly those of
`tvbod bench cartpole` / `temperature`. `--quick` replaces the budgets (candidates, polish and MAP
iterations) of every row, the shipped one included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import plant_runs as pr
from .. import wdbo

NAMES = ("et-shipped", "et-bounds", "et-safe", "gp-ucb-safe", "et-paper", "gp-ucb", "r-gp-ucb", "tv-gp-ucb", "ui-tvbo", "oracle", "wdbo")
#: The paper-setting rows' time-varying settings (the cart-pole bench's).
FORGETTING, DRIFT = 0.03, 0.03
#: The oracle grid: R-GP-UCB's N, TV-GP-UCB's eps, UI-TVBO's sigma_w^2 (wide: a best at either
#: end is flagged in the tables).
GRID_PERIODS = (5, 10, 20, 40, 80)
GRID_EPS = (0.003, 0.01, 0.03, 0.1, 0.3)
#: Generic box plants: SE kernel on the unit cube, lengthscales by MAP under Gamma(15, rate) with
#: its mode at `LENGTHSCALE` box widths (the paper's shape), noise variance and beta as the paper.
LENGTHSCALE, PRIOR_SHAPE = 0.3, 15.0
NOISE_VARIANCE, BETA = 0.02, {"c1": 0.8, "c2": 4.0}


#: The `et-bounds` row: an `Algo` param (not a strategy key) marks it.
BOUNDS = "bounds-only"
BOUNDS_ONLY = pr.Algo("ET-GP-UCB (bounds only)", "et-gp-ucb", ((BOUNDS, 1),))
#: The safe rows: the bounds-only file plus `safety:` (`safety_for`).
SAFE = "safety"
SAFE_ET = pr.Algo("ET-GP-UCB + safety", "et-gp-ucb", ((BOUNDS, 1), (SAFE, 1)))
SAFE_GP = pr.Algo("GP-UCB + safety", "gp-ucb", ((BOUNDS, 1), (SAFE, 1)))
#: `safety_for`: the threshold is this quantile of the nominal cost over the box.
SAFE_QUANTILE = 0.9


@dataclass(frozen=True)
class Budget:
    """Per-ask effort: Sobol candidates, polish starts and iterations, MAP iterations."""

    candidates: int = 1024
    starts: int = 5
    maxiter: int = 50
    map_maxiter: int = 30


QUICK = Budget(candidates=128, starts=1, maxiter=10, map_maxiter=10)


def rows(names: tuple[str, ...], horizon: int) -> tuple[tuple[pr.Algo, str], ...]:
    """`(Algo, role)` per row for the chosen `names`; role `row` or `oracle` (a grid point)."""
    period = int(math.ceil(min(horizon, 12.0 * FORGETTING ** -0.25)))
    et, paper, *base = pr.five_algorithms(period, FORGETTING, DRIFT)
    by = {"et-shipped": [pr.shipped_algo("ET-GP-UCB (shipped)", "cartpole")],
          "et-bounds": [BOUNDS_ONLY], "et-safe": [SAFE_ET], "gp-ucb-safe": [SAFE_GP],
          "et-paper": [paper],
          **{a.strategy: [a] for a in base}}
    out = [(a, "row") for n in names if n in by for a in by[n]]
    if "oracle" in names:
        out += [(a, "oracle") for a in pr.with_grid((), GRID_PERIODS, GRID_EPS, GRID_EPS)]
    if "wdbo" in names:
        out += [(a, "row") for a in wdbo.rows(True)]
    return tuple(out)


def applies(algo: pr.Algo, plant) -> bool:
    """Whether row `algo` runs on `plant`: box-only rows on boxes, safe rows where a plant has
    unsafe gains."""
    if SAFE in dict(algo.params) and not has_unsafe_gains(plant):
        return False
    return not (hasattr(plant, "arms") and box_only(algo))


def box_only(algo: pr.Algo) -> bool:
    """Rows that need a box domain: W-DBO and the bounds-only plant file."""
    return algo.strategy == "wdbo" or BOUNDS in dict(algo.params)


def grid_value(algo: pr.Algo) -> float:
    return float(next(iter(dict(algo.params).values())))


def on_grid_edge(algo: pr.Algo) -> bool:
    """The grid point is the first or last of its strategy's grid."""
    grid = GRID_PERIODS if algo.strategy == "r-gp-ucb" else GRID_EPS
    return grid_value(algo) in (grid[0], grid[-1])


def spec(plant, algo: pr.Algo, seed: int, horizon: int, budget: Budget) -> dict:
    """The optimizer mapping of `algo` on `plant` in one run."""
    if BOUNDS in dict(algo.params):
        extra = {k: v for k, v in algo.params if k not in (BOUNDS, SAFE)}
        if SAFE in dict(algo.params):
            extra |= {"strategy": algo.strategy, "safety": safety_for(plant.name)}
        m = bounds_only(plant, seed, extra)
    elif pr.SHIPPED in dict(algo.params):
        own = plant.name if plant.name in ("cartpole", "temperature") else None
        shipped = pr.Algo(algo.label, algo.strategy, ((pr.SHIPPED, own or "cartpole"),))
        m = pr.shipped_spec(shipped, seed, **({} if own else {"domain": _box(plant)}))
    elif plant.name == "cartpole":
        m = _cartpole(algo, seed, horizon, budget)
    elif plant.name == "temperature":
        from ..temperature import build_spec

        m = build_spec(algo, plant.kernel, seed)
    else:
        m = _generic(plant, algo, seed, budget)
    return _budgeted(m, budget) if budget != Budget() else m


def bounds_only(plant, seed: int, extra: dict | None = None) -> dict:
    """The optimizer mapping the daemon makes of a plant file with only bounds (the plant's box,
    `sense: minimize`, `optimizer: {strategy: et-gp-ucb}` plus `extra`), under the newest
    behaviour version, as for a new plant."""
    from tvbod.core.behaviours import NEWEST

    if not hasattr(plant, "lower"):
        raise ValueError(f"plant {plant.name!r} has no box: the bounds-only row needs one")
    return {"strategy": "et-gp-ucb", **(extra or {}), "seed": seed, "sense": "minimize",
            "domain": _box(plant), "behaviour": NEWEST}


@lru_cache(maxsize=None)
def safety_for(name: str) -> dict:
    """The safe rows' `safety:` on a box plant: the box's centre as the one safe seed (the
    controller a user runs today), and as `max_cost` the nominal cost that one gain set in ten
    of the box exceeds (`SAFE_QUANTILE` over the `nominal_costs` Sobol points and corners,
    catastrophes counted as exceeding), at least 10 % above the centre's cost."""
    from .plant import Drift
    from .plants import plant as get

    p = get(name)
    centre = (np.asarray(p.lower, float) + np.asarray(p.upper, float)) / 2.0
    costs = nominal_costs(name)
    threshold = max(float(np.quantile(costs, SAFE_QUANTILE)),
                    1.1 * float(p.cost(centre, 1, Drift())))
    return {"max_cost": threshold, "safe_seeds": [centre.tolist()]}


def has_unsafe_gains(plant) -> bool:
    """A box plant with a catastrophe (a finite `catastrophic_cost`): where the safe rows run.
    The synthetic functions have none (and Ackley's optimum is the box's centre, the seed)."""
    return hasattr(plant, "lower") and math.isfinite(plant.catastrophic_cost)


def threshold_of(algo: pr.Algo, plant) -> float | None:
    """The safety threshold a run is scored against: every row on a plant with unsafe gains
    against the safe rows' threshold, so violations compare side by side; else None."""
    return safety_for(plant.name)["max_cost"] if has_unsafe_gains(plant) else None


def _box(plant) -> dict:
    return {"type": "box", "lower": [float(v) for v in plant.lower],
            "upper": [float(v) for v in plant.upper]}


def _budgeted(m: dict, budget: Budget) -> dict:
    """`m` with the budget's effort (kept where `m` has no such section: an arms domain)."""
    m = dict(m)
    if m["domain"]["type"] == "box":
        m["budget"] = {**m.get("budget", {}), "candidates": budget.candidates,
                       "starts": budget.starts, "maxiter": budget.maxiter}
    if isinstance(m.get("hyperparameters"), dict):
        m["hyperparameters"] = {**m["hyperparameters"], "maxiter": budget.map_maxiter}
    return m


def _cartpole(algo: pr.Algo, seed: int, horizon: int, budget: Budget) -> dict:
    from .. import cartpole as cp

    s = _cartpole_map()
    effort = {} if budget == Budget() else {
        "map_maxiter": budget.map_maxiter, "candidates": budget.candidates,
        "starts": budget.starts, "polish_maxiter": budget.maxiter}
    cfg = cp.Config(horizon=horizon, offset=s["offset"], scale=s["scale"], **effort)
    return cp.build_spec(algo, cfg, seed)


@lru_cache(maxsize=1)
def _cartpole_map() -> dict:
    from .. import cartpole as cp

    return cp.measurement_scaling()


@lru_cache(maxsize=None)
def nominal_costs(name: str) -> np.ndarray:
    """A box plant's nominal noise-free cost over 256 scrambled Sobol gains (seed 0) and the box
    corners, catastrophes included."""
    import itertools

    from scipy.stats import qmc

    from .plant import Drift
    from .plants import plant as get

    p = get(name)
    lo, hi = np.asarray(p.lower, float), np.asarray(p.upper, float)
    X = np.vstack([lo + qmc.Sobol(len(lo), scramble=True, seed=0).random(256) * (hi - lo),
                   np.array(list(itertools.product(*zip(lo, hi))))])
    return np.array([p.cost(x, 1, Drift()) for x in X])


@lru_cache(maxsize=None)
def nominal_map(name: str) -> dict:
    """The fixed measurement map of a box plant: its nominal noise-free cost over 256 scrambled
    Sobol gains (seed 0) and the box corners, catastrophes left out, onto [-2, 2]."""
    from .plants import plant as get

    costs = nominal_costs(name)
    return pr.range_map(costs[costs < get(name).catastrophic_cost])


def _generic(plant, algo: pr.Algo, seed: int, budget: Budget) -> dict:
    s = nominal_map(plant.name)
    return {
        "strategy": algo.strategy, "sense": "minimize", "seed": seed, "domain": _box(plant),
        "kernel": {"type": "se", "lengthscales": LENGTHSCALE}, "noise_variance": NOISE_VARIANCE,
        "beta": dict(BETA), "delta_b": 0.1,
        "measurement": {"offset": s["offset"], "scale": s["scale"]},
        "budget": {"candidates": budget.candidates, "starts": budget.starts,
                   "maxiter": budget.maxiter},
        "hyperparameters": {"lengthscales": "map",
                            "prior": {"shape": PRIOR_SHAPE,
                                      "rate": (PRIOR_SHAPE - 1.0) / LENGTHSCALE},
                            "refit_every": 1, "restarts": 0, "maxiter": budget.map_maxiter},
        **dict(algo.params),
    }
