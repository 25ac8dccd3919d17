"""`tvbod bench temperature`: the Intel Lab temperature sensors as a time-varying 50-arm bandit,
the ET-GP-UCB paper's real-data experiment (Brunzema et al., arXiv 2208.10790, Sec. VI-A, after
Bogunovic et al. 2016), in-process.

Arms = the 50 sensors; `f_t(arm)` = the arm's temperature at test step `t = 1..96`, standardized
by the training mean and std; kernel = the empirical covariance of the standardized training rows
(`tvbod.core.kernels.empirical_covariance`, a matrix kernel, used as is); noise variance
0.01; `beta_t = 0.4 ln(4t)` (the within-model setting's c1, c2); `delta_B = 0.1`; TV-GP-UCB
`eps = 0.03`, R-GP-UCB `N = 15`, UI-TVBO `sigma_w^2 = 0.03`. The measurement is the noise-free
standardized temperature (the data are the data), so a run's only randomness is the strategy's
seed (the first, uniformly random proposal); runs differ by that seed. Regret
`max_a f_t(a) - f_t(chosen)`.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import plant_runs as pr
from . import sweep

HORIZON = 96
NOISE_VARIANCE = 0.01
BETA_C1, BETA_C2 = 0.4, 4.0  # beta_t = 0.4 ln(4t)
DELTA_B = 0.1
FORGETTING, RESET_PERIOD, DRIFT = 0.03, 15, 0.03
#: The fixed forgetting floor the shipped file's `auto` replaced (told a drift rate); a row.
FIXED_FLOOR = 0.02
#: `--oracle`: TV-GP-UCB's eps and UI-TVBO's sigma_w^2, and R-GP-UCB's N.
ORACLE_GRID = (0.005, 0.01, 0.02, 0.03, 0.05)
ORACLE_PERIODS = (5, 10, 15, 20, 30)


@dataclass(frozen=True)
class Config:
    horizon: int = HORIZON


@lru_cache(maxsize=1)
def plant_data() -> tuple[np.ndarray, np.ndarray]:
    """`(K (50, 50), test_z (50, 96))` from the shipped split."""
    from plant_adapters.temperature.source import load_split, standardize
    from tvbod.core.kernels import empirical_covariance as empirical_kernel

    train_z, test_z, _, _ = standardize(*load_split())
    return empirical_kernel(train_z), test_z


def build_spec(algo: pr.Algo, K: np.ndarray, seed: int) -> dict:
    """The `optimizer:` mapping of one algorithm in one run (a shipped row: the shipped file's,
    seeded, its kernel the empirical covariance the file names)."""
    if pr.SHIPPED in dict(algo.params):
        return pr.shipped_spec(algo, seed)
    return {
        "strategy": algo.strategy, "sense": "maximize", "seed": seed,
        "domain": {"type": "arms", "n_arms": int(K.shape[0])},
        "kernel": {"type": "matrix", "matrix": K},
        "noise_variance": NOISE_VARIANCE, "beta": {"c1": BETA_C1, "c2": BETA_C2},
        "delta_b": DELTA_B,
        "measurement": {"offset": 0.0, "scale": 1.0},  # the readings are standardized already
        **dict(algo.params),
    }


def run_task(run: int, algo: pr.Algo, seed: int, cfg: Config) -> dict:
    """One algorithm on the test days for `cfg.horizon` steps, strategy seed from (seed, run)."""
    from plant_adapters.temperature.source import TemperatureStream
    from tvbod.core import make_strategy

    t_start = time.process_time()
    K, test_z = plant_data()
    stream = TemperatureStream(test_z)
    rs = pr.run_seed(seed, run)
    strategy = make_strategy(build_spec(algo, K, rs))
    regret, resets, arms = [], [], []
    for t in range(1, cfg.horizon + 1):
        arm = int(strategy.ask()[0])
        arms.append(arm)
        regret.append(stream.regret(arm, t))
        if strategy.tell(np.array([arm]), stream.value(arm, t)).reset:
            resets.append(t)
    optimum = sum(stream.best(t) for t in range(1, cfg.horizon + 1))
    return {"run": run, "label": algo.label, "regret": regret, "reset_times": resets,
            "arms": arms, "first_arm": arms[0],
            "realisation": {"data_sha": _fingerprint(test_z), "optimum_sum": round(optimum, 9)},
            "cpu_s": time.process_time() - t_start}


def _fingerprint(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a, dtype=float).tobytes()).hexdigest()[:16]


def data_facts(horizon: int) -> dict:
    """What makes this plant hard: how often the best sensor changes, the kernel's conditioning."""
    K, test_z = plant_data()
    best = test_z[:, :horizon].argmax(axis=0)
    eig = np.linalg.eigvalsh(K)
    return {"best_arm_changes": int(np.sum(best[1:] != best[:-1])),
            "distinct_best_arms": int(len(set(best.tolist()))),
            "kernel_eig_min": float(eig[0]), "kernel_eig_max": float(eig[-1]),
            "kernel_condition": float(eig[-1] / eig[0]),
            "kernel_diag_range": [float(np.diag(K).min()), float(np.diag(K).max())],
            "f_range": [float(test_z[:, :horizon].min()), float(test_z[:, :horizon].max())]}


def algorithms(oracle: bool = False) -> tuple[pr.Algo, ...]:
    """ET-GP-UCB as shipped (`configs/plants/temperature.yaml`'s optimizer: robust trigger,
    `forgetting_floor: auto`), with the fixed floor it
    replaced, without a floor, with the paper's trigger, the four baselines; with `oracle` the
    baselines over ORACLE_GRID (R-GP-UCB over ORACLE_PERIODS)."""
    rows = (pr.shipped_algo("ET-GP-UCB", "temperature"),
            pr.Algo(f"ET-GP-UCB (floor {FIXED_FLOOR:g})", "et-gp-ucb",
                    (("forgetting_floor", FIXED_FLOOR),)),
            *[pr.Algo(a.label + (" (no floor)" if a.label == "ET-GP-UCB" else ""), a.strategy,
                      a.params) for a in pr.five_algorithms(RESET_PERIOD, FORGETTING, DRIFT)])
    return pr.with_grid(rows, ORACLE_PERIODS, ORACLE_GRID, ORACLE_GRID) if oracle else rows


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, help="runs, one seed each (default 20)")
    sweep.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--horizon", type=int, default=HORIZON,
                        help=f"test steps T (default {HORIZON}, all of the test days)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/temperature"),
                        help="directory for results.json and the PNG plots")
    parser.add_argument("--oracle", action="store_true",
                        help="also run every time-varying baseline over the oracle grid")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args: argparse.Namespace) -> int:
    _, test_z = plant_data()
    if args.runs < 1 or args.workers < 1 or not 1 <= args.horizon <= test_z.shape[1]:
        print(f"--runs and --workers must be >= 1 and 1 <= --horizon <= {test_z.shape[1]}",
              file=sys.stderr)
        return 2
    cfg = Config(args.horizon)
    algos = algorithms(args.oracle)
    done = pr.sweep_rows(run_task, algos, args, cfg, "temperature", _row_extras)
    if done is None:
        return 1
    outcome, summary = done
    facts = data_facts(args.horizon)
    checks = [pr.lowest_regret_check(summary, "temperature")]
    if args.oracle:
        checks.append(pr.oracle_check(summary, "temperature", 0.0))
    print(pr.format_table(summary, f"Temperature: {args.runs} runs (seeds), T = {args.horizon}, "
                                   f"50 sensors, beta_t = {BETA_C1:g} ln({BETA_C2:g} t), noise "
                                   f"variance {NOISE_VARIANCE:g}"))
    print(f"best sensor changes {facts['best_arm_changes']} times over {args.horizon} steps "
          f"({facts['distinct_best_arms']} distinct); kernel condition number "
          f"{facts['kernel_condition']:.3g}")
    print("same data for every algorithm in every run:", pr.same_realisation(summary))
    print()
    print(pr.format_claims(checks))
    doc = {"config": {"runs": args.runs, "seed": args.seed, "workers": args.workers,
                      "horizon": args.horizon, "noise_variance": NOISE_VARIANCE,
                      "beta": [BETA_C1, BETA_C2], "delta_b": DELTA_B},
           "data": facts, "wall_time_s": round(outcome.wall_s, 2), "wins": pr.wins(summary),
           "algorithms": summary,
           "same_realisation": pr.same_realisation(summary), "claims": checks}
    return sweep.finish(args, outcome, doc,
                        lambda: pr.figures(summary, args.horizon, args.out, "temperature"))


def _row_extras(runs: list[dict]) -> dict:
    """A row's fields besides the common summary: each run's first arm and its arms."""
    return {"first_arms": [r["first_arm"] for r in runs], "arms": [r["arms"] for r in runs]}
