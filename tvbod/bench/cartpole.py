"""`tvbod bench cartpole`: policy search on the linearized cart-pole with a friction jump, the
ET-GP-UCB paper's setting (Brunzema et al., arXiv 2208.10790, Sec. VI), in-process.

Four gains in the box `[-3, -6, -50, -4] .. [-2, -4, -25, -2]`, the kernel acting on `K / s` with
`s = [1/8, 1/4, 3, 1/8]`; the cost `J_t(K)` of one noisy 20-s episode is minimized; the bearing
friction jumps x2.5 at `t = 100`; `T = 300`. SE kernel with lengthscales learned online by MAP
under a Gamma(15, 10/3) prior, noise variance 0.02, `beta_t = 0.8 ln(4t)`, `delta_B = 0.1`;
TV-GP-UCB `eps = 0.03`, R-GP-UCB `N = 29`, UI-TVBO `sigma_w^2 = 0.03`. `--oracle` adds every
time-varying baseline over a grid (`eps`, `sigma_w^2` in ORACLE_GRID, R-GP-UCB's `N` from the same
`eps` by the paper's `N = ceil(12 eps^(-1/4))`): an oracle a user would not have.

Measurement map: "ET-GP-UCB" is the shipped plant file's optimizer, read from
`configs/plants/cartpole.yaml` (robust trigger, `measurement: auto`: calibrated from the run's
first 20 costs, docs/configuration.md), only seeded: its own budgets and MAP settings, whatever
`--candidates` and the MAP options say for the other rows. Every other
row uses the fixed range scaling of the paper's setup (fixed before the run, never from the run's
data): the noise-free cost at the nominal friction is evaluated on 1024 scrambled Sobol gains
(seed 0) plus the 16 box corners; `offset = (max + min) / 2`, `scale = (max - min) / 4`: the box
lands in `[-2, 2]` on the GP scale. `--units x` multiplies every measured cost by `x` (the plant
measured in other units) while the fixed scaling stays: the scale-sensitivity sweep.
Regret is the plant's exact `J_t(K) - J_t(K*_t)` under the same noise. A failed episode (cost above
the plant's `max_cost`) is told as the posterior mean + 3 std at that point (the daemon's default
`mean_plus_sigma` policy) and counted with regret `max_cost - J_t(K*_t)`, a lower bound.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import plant_runs as pr
from . import sweep
from . import wdbo

SCALING = (1 / 8, 1 / 4, 3.0, 1 / 8)
HORIZON, JUMP_AT, JUMP_FACTOR = 300, 100, 2.5
NOISE_VARIANCE = 0.02
BETA_C1, BETA_C2 = 0.8, 4.0  # beta_t = 0.8 ln(4t)
DELTA_B = 0.1
PRIOR_SHAPE, PRIOR_RATE = 15.0, 10.0 / 3.0
FORGETTING, RESET_PERIOD, DRIFT = 0.03, 29, 0.03
#: The oracle grid of `--oracle`: TV-GP-UCB's eps, UI-TVBO's sigma_w^2, R-GP-UCB's N(eps).
ORACLE_GRID = (0.005, 0.01, 0.02, 0.03, 0.05)
#: "Within 5 % of or below" the oracle-tuned baselines (the drift issue's goal).
ORACLE_MARGIN = 0.05
FAILURE_SIGMAS = 3.0
#: Scaling sample: 2^10 scrambled Sobol gains with this seed, plus the 2^4 corners.
SCALING_POINTS, SCALING_SEED = 1024, 0
#: "Resets within a few steps after the jump": median delay <= FEW_STEPS, detected within
#: FEW_STEPS in at least DETECTED_SHARE of the runs.
FEW_STEPS, DETECTED_SHARE = 5, 0.8
#: A ramp reaches the jump's friction this many steps after it starts.
RAMP_STEPS = 50
#: The optimizer's effort (`--refit-every`, `--map-restarts`, `--map-maxiter`, `--candidates`):
#: a MAP refit every step with no restarts (prior draws) and up to 50 L-BFGS-B iterations; 1024
#: Sobol candidates per ask.
REFIT_EVERY, MAP_RESTARTS, MAP_MAXITER, CANDIDATES = 1, 0, 50, 1024


@dataclass(frozen=True)
class Config:
    """Everything a worker needs besides the algorithm and the run (plain, picklable)."""

    horizon: int = HORIZON
    jump_at: int = JUMP_AT
    profile: str = "jump"  # jump | ramp (over RAMP_STEPS from jump_at) | constant (no change)
    offset: float = 0.0
    scale: float = 1.0
    units: float = 1.0  # every measured cost is multiplied by this (the scale sweep)
    refit_every: int = REFIT_EVERY
    map_restarts: int = MAP_RESTARTS
    map_maxiter: int = MAP_MAXITER
    candidates: int = CANDIDATES
    starts: int = 5
    polish_maxiter: int = 50


def make_plant(seed: int, jump_at: int = JUMP_AT, profile: str = "jump"):
    """The run's plant: default parameters, friction x2.5 from `jump_at` (a `ramp` reaches x2.5
    `RAMP_STEPS` later; `constant` never changes), noise `rng([seed, t])`."""
    from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, FrictionProfile

    params = CartPoleParams()
    mu = params.friction
    friction = {"jump": lambda: FrictionProfile.jump(mu, JUMP_FACTOR, jump_at),
                "ramp": lambda: FrictionProfile.ramp(mu, JUMP_FACTOR, jump_at, jump_at + RAMP_STEPS),
                "constant": lambda: FrictionProfile.constant(mu)}[profile]()
    return CartPolePlant(params, friction, seed)


def scaling_sample() -> np.ndarray:
    """The gains `(SCALING_POINTS + 16, 4)` the measurement scaling is computed from."""
    from scipy.stats import qmc

    from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

    lo, hi = np.array(DOMAIN_LOWER), np.array(DOMAIN_UPPER)
    m = int(np.log2(SCALING_POINTS))
    unit = qmc.Sobol(4, scramble=True, seed=SCALING_SEED).random_base2(m)
    corners = np.array(list(itertools.product(*zip(lo, hi))))
    return np.vstack([lo + unit * (hi - lo), corners])


def measurement_scaling() -> dict:
    """`{offset, scale, cost_min, cost_max}`: the nominal-friction, noise-free cost range over
    `scaling_sample()` mapped onto `[-2, 2]` (failed gains, cost above `max_cost`, are left out)."""
    from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, closed_loop_cost

    params = CartPoleParams()  # nominal friction
    costs = np.array([closed_loop_cost(k, params, noise_seed=None) for k in scaling_sample()])
    return pr.range_map(costs[costs <= CartPolePlant().max_cost])


def build_spec(algo: pr.Algo, cfg: Config, seed: int) -> dict:
    """The `optimizer:` mapping of one algorithm in one run (a shipped row: the shipped file's,
    seeded)."""
    from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

    if pr.SHIPPED in dict(algo.params):
        return pr.shipped_spec(algo, seed)
    return {
        "strategy": algo.strategy, "sense": "minimize", "seed": seed,
        "domain": {"type": "box", "lower": list(DOMAIN_LOWER), "upper": list(DOMAIN_UPPER),
                   "scaling": list(SCALING)},
        "kernel": {"type": "se", "lengthscales": (PRIOR_SHAPE - 1) / PRIOR_RATE},  # prior mode
        "noise_variance": NOISE_VARIANCE, "beta": {"c1": BETA_C1, "c2": BETA_C2},
        "delta_b": DELTA_B, "measurement": {"offset": cfg.offset, "scale": cfg.scale},
        "budget": {"candidates": cfg.candidates, "starts": cfg.starts,
                   "maxiter": cfg.polish_maxiter},
        "hyperparameters": {"lengthscales": "map",
                            "prior": {"shape": PRIOR_SHAPE, "rate": PRIOR_RATE},
                            "refit_every": cfg.refit_every, "restarts": cfg.map_restarts,
                            "maxiter": cfg.map_maxiter},
        **dict(algo.params),
    }


def run_task(run: int, algo: pr.Algo, seed: int, cfg: Config) -> dict:
    """One algorithm on run `run`'s plant for `cfg.horizon` steps."""
    if algo.strategy == wdbo.STRATEGY:
        return wdbo.run_cartpole(run, algo, seed, cfg, make_plant)
    from tvbod.core import make_strategy

    t_start = time.process_time()
    rs = pr.run_seed(seed, run)
    plant = make_plant(rs, cfg.jump_at, cfg.profile)
    strategy = make_strategy(build_spec(algo, cfg, rs))
    regret, resets, failures, outside, optimum = [], [], 0, 0, 0.0
    for t in range(1, cfg.horizon + 1):
        x = strategy.ask()
        ev = plant.evaluate(x, t)
        optimum += ev.optimal_cost
        if ev.failed:
            failures += 1
            mean, std = strategy.predict(x)
            y = mean + FAILURE_SIGMAS * std  # minimize: worse = higher cost
            regret.append(plant.max_cost - ev.optimal_cost)
        else:
            y = ev.cost * cfg.units
            regret.append(ev.regret)
        outside += abs(strategy.to_internal_y(y)) > 3.0
        if strategy.tell(x, y).reset:
            resets.append(t)
    return {"run": run, "label": algo.label, "regret": regret, "reset_times": resets,
            "failures": failures, "outside_prior": int(outside),
            "lengthscales": strategy.lengthscales.round(4).tolist(),
            "exploration": None if strategy.exploration is None else strategy.exploration.state_dict(),
            "realisation": {"plant_seed": rs, "optimal_cost_sum": round(optimum, 9)},
            "cpu_s": time.process_time() - t_start}


def reset_period_for(eps: float) -> int:
    """R-GP-UCB's `N = ceil(min(T, 12 eps^(-1/4)))` (Bogunovic et al. 2016; 29 at eps = 0.03)."""
    return int(math.ceil(min(HORIZON, 12.0 * eps ** -0.25)))


def algorithms(oracle: bool = False) -> tuple[pr.Algo, ...]:
    """The rows: ET-GP-UCB as shipped (`configs/plants/cartpole.yaml`'s optimizer), the robust and
    the paper's trigger on the fixed range scaling, the four baselines at the paper's settings, and
    with `oracle` every time-varying baseline over `ORACLE_GRID` as well."""
    et_fixed, paper, *rest = pr.five_algorithms(RESET_PERIOD, FORGETTING, DRIFT)
    rows = (pr.shipped_algo("ET-GP-UCB", "cartpole"),
            pr.Algo("ET-GP-UCB (fixed scale)", et_fixed.strategy, et_fixed.params), paper, *rest)
    if not oracle:
        return rows
    return pr.with_grid(rows, [reset_period_for(e) for e in ORACLE_GRID], ORACLE_GRID, ORACLE_GRID)


# ---------------------------------------------------------------------- claims
def check_claims(summary: list[dict], detection: dict) -> list[dict]:
    """The claims on this plant: ET-GP-UCB has the lowest mean R_T of the five (if all ran), and it
    resets within `FEW_STEPS` after the jump (median, and in `DETECTED_SHARE` of the runs)."""
    checks = ([pr.lowest_regret_check(summary, "cart-pole")]
              if any(a["strategy"] != "et-gp-ucb" for a in summary) else [])
    if len(summary) > len(algorithms()) and len(pr.oracle_best(summary)) == 3:
        checks.append(pr.oracle_check(summary, "cart-pole", ORACLE_MARGIN))
    d = detection
    ok = d["detected"] and d["median_delay"] <= FEW_STEPS and (
        d["within_window"] >= DETECTED_SHARE * d["runs"])
    delay = (f"median delay {d['median_delay']:g}, range {d['min_delay']}..{d['max_delay']}"
             if d["detected"] else "no reset at or after the jump in any run")
    resets = next(a["resets_mean"] for a in summary if a["strategy"] == "et-gp-ucb")
    checks.append({
        "name": f"cart-pole: ET-GP-UCB resets within a few (<= {FEW_STEPS}) steps after the jump",
        "holds": bool(ok),
        "detail": f"{delay}; within {FEW_STEPS} steps in {d['within_window']}/{d['runs']} runs "
                  f"(needs >= {DETECTED_SHARE:.0%}); {d['false_resets']} false resets before "
                  f"t = {d['t0']}; mean resets per run {resets:.1f}"})
    return checks


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, help="runs (default 20)")
    sweep.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--horizon", type=int, default=HORIZON, help=f"steps T (default {HORIZON})")
    parser.add_argument("--jump-at", type=int, default=JUMP_AT,
                        help=f"step of the friction jump (default {JUMP_AT})")
    parser.add_argument("--profile", choices=("jump", "ramp", "constant"), default="jump",
                        help="friction change: jump (default), ramp over 50 steps, constant (none)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/cartpole"),
                        help="directory for results.json and the PNG plots")
    parser.add_argument("--algos", type=_parse_algos, default=None,
                        help="comma list of strategies to run (default all five)")
    parser.add_argument("--refit-every", type=int, default=REFIT_EVERY,
                        help=f"MAP lengthscale refit every k-th step (default {REFIT_EVERY})")
    parser.add_argument("--map-maxiter", type=int, default=MAP_MAXITER,
                        help="L-BFGS-B iterations per refit")
    parser.add_argument("--map-restarts", type=int, default=MAP_RESTARTS,
                        help="prior draws per refit")
    parser.add_argument("--candidates", type=int, default=CANDIDATES,
                        help="Sobol candidates per ask")
    parser.add_argument("--offset", type=float, default=None,
                        help="override the measurement offset (diagnostics; default: the rule)")
    parser.add_argument("--scale", type=float, default=None,
                        help="override the measurement scale (diagnostics; default: the rule)")
    parser.add_argument("--oracle", action="store_true",
                        help="also run every time-varying baseline over the oracle grid")
    parser.add_argument("--units", type=float, default=1.0,
                        help="multiply every measured cost by this (scale sweep; default 1)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-wdbo", action="store_true",
                        help="leave out the W-DBO row (run when the anchors extra is installed)")


def _parse_algos(text: str) -> tuple[str, ...]:
    return sweep.comma_list(text, [a.strategy for a in algorithms()] + [wdbo.STRATEGY], "strategy")


def run(args: argparse.Namespace) -> int:
    if (args.runs < 1 or args.workers < 1 or not 1 <= args.jump_at <= args.horizon
            or not args.units > 0):
        print("--runs and --workers must be >= 1, 1 <= --jump-at <= --horizon, --units > 0",
              file=sys.stderr)
        return 2
    scaling = measurement_scaling()
    if args.offset is not None:
        scaling["offset"] = args.offset
    if args.scale is not None:
        scaling["scale"] = args.scale
    cfg = Config(args.horizon, args.jump_at, args.profile, scaling["offset"], scaling["scale"],
                 args.units, args.refit_every, args.map_restarts, args.map_maxiter, args.candidates)
    algos = pr.select(algorithms(args.oracle), args.algos) + wdbo.rows(
        not args.no_wdbo and (args.algos is None or wdbo.STRATEGY in args.algos))
    if not algos:
        print("nothing to run: --algos named only wdbo, which is not installed", file=sys.stderr)
        return 2
    print(f"measurement scaling: offset {cfg.offset:.4f}, scale {cfg.scale:.4f} (nominal cost "
          f"range {scaling['cost_min']:.3f}..{scaling['cost_max']:.3f})", file=sys.stderr)
    done = pr.sweep_rows(run_task, algos, args, cfg, "cartpole", _row_extras)
    if done is None:
        return 1
    outcome, summary = done
    et = next((a for a in summary if a["strategy"] == "et-gp-ucb"), None)
    detections = {a["label"]: pr.detection_stats(a["reset_times"], args.jump_at, FEW_STEPS)
                  for a in summary if a["strategy"] == "et-gp-ucb"}
    detection = detections.get(et["label"]) if et else None
    checks = check_claims(summary, detection) if et and args.profile == "jump" else []
    change = {"jump": f"friction x{JUMP_FACTOR:g} at t = {args.jump_at}",
              "ramp": f"friction ramp to x{JUMP_FACTOR:g} over t = {args.jump_at}.."
                      f"{args.jump_at + RAMP_STEPS}", "constant": "no change"}[args.profile]
    print(pr.format_table(summary, f"Cart-pole: {args.runs} runs, T = {args.horizon}, {change}, "
                                   f"refit every {args.refit_every}"))
    for label, d in detections.items():
        print(pr.format_detection(d, label))
    print("same plant realisation for every algorithm in every run:", pr.same_realisation(summary))
    print()
    print(pr.format_claims(checks))
    doc = {"config": {"runs": args.runs, "seed": args.seed, "workers": args.workers,
                      **cfg.__dict__, "scaling": scaling, "noise_variance": NOISE_VARIANCE,
                      "beta": [BETA_C1, BETA_C2], "delta_b": DELTA_B,
                      "prior": [PRIOR_SHAPE, PRIOR_RATE], "jump_factor": JUMP_FACTOR,
                      "failure_sigmas": FAILURE_SIGMAS,
                      "wdbo": wdbo.note_versions() if wdbo.ALGO in algos else None},
           "wall_time_s": round(outcome.wall_s, 2), "wins": pr.wins(summary),
           "algorithms": summary, "detection": detection, "detections": detections,
           "same_realisation": pr.same_realisation(summary), "claims": checks}
    return sweep.finish(args, outcome, doc, lambda: pr.figures(summary, args.horizon, args.out,
                                                                "cart-pole", args.jump_at))


def _row_extras(runs: list[dict]) -> dict:
    """A row's fields besides the common summary: the mean count per run of measurements outside
    `[-3, 3]` on the GP's scale, and each run's final lengthscales."""
    return {"outside_prior_mean": float(np.mean([r["outside_prior"] for r in runs])),
            "lengthscales_final": [r["lengthscales"] for r in runs]}
