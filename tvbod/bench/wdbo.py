"""W-DBO (Bardou, Thiran, Ranieri, "This Too Shall Pass: Removing Stale Observations in Dynamic
Bayesian Optimization", NeurIPS 2024) as an outside anchor in `tvbod bench cartpole` and
`tvbod bench within-model`, on exactly the plant realisations of the other rows.

W-DBO is the PyPI package `wdbo-algo` (the authors' code: gpytorch + BoTorch + a C++ criterion),
installed by the `anchors` extra; torch never enters the daemon or `tvbod.core`, and nothing here
imports torch until a W-DBO row runs. When the package is missing the benches print `NOT_INSTALLED`
and leave the row out.

Used as its README says: `WDBOOptimizer(spatial_domain, MaternKernel, MaternKernel, [2.5], [2.5],
n_initial_observations=15, alpha=0.25)` (Matern-5/2 in space and time as in the paper, its
recommended `alpha`, its default initial design of 15 uniform random points), then per step
`next_query(t)`, `tell(x, t, y)`, `clean(t)`. W-DBO maximizes, so it is told `-cost` on the
cart-pole (and `y` as is on the within-model GP samples). It learns every hyperparameter itself
(ML-II, refit from scratch at every tell) and standardizes `y` on its own dataset, so no
measurement scaling is given to it.

Time. W-DBO normalizes space to `[0, 1]^d` but takes time as given; its gpytorch lengthscales start
at 0.69 and are fitted with 150 Adam steps (lr 0.1) per tell. Step `t` is told as
`t / time_unit` with `time_unit` the benchmark's default horizon (300 on the cart-pole, 400 within
model), so the paper-length run spans `[0, 1]` in time as the box does in space. Told raw steps,
its temporal lengthscale would start at 0.69 steps and could not grow far past ~15 steps in 150 Adam
steps: a model that forgets a static plant within a few steps.

Accounting is the other rows' (`cartpole.run_task`): regret `J_t(K) - J_t(K*_t)` on the run's plant
(`make_plant(run_seed(seed, run))`); a failed episode counts `max_cost - J_t(K*_t)` and is told as
the posterior mean + 3 std at that point (W-DBO's own posterior, in its own units; before its first
model, during the initial design, as `max_cost`). W-DBO never resets: `reset_times` is empty, and
the steps where `clean` removed observations are in `removal_times` (with `removed` per such step).
The per-run seed seeds torch and numpy's global generator (W-DBO's initial design draws from
`np.random`), both restored afterwards, so a run is reproducible.
"""

from __future__ import annotations

import importlib.util
import math
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from . import plant_runs as pr

STRATEGY, LABEL = "wdbo", "W-DBO"
ALGO = pr.Algo(LABEL, STRATEGY)
#: The paper's recommended removal budget and the package defaults.
ALPHA, INITIAL_OBSERVATIONS, MATERN_NU = 0.25, 15, 2.5
#: Steps per unit of W-DBO time (the benchmarks' default horizons).
CARTPOLE_TIME_UNIT, WITHIN_MODEL_TIME_UNIT = 300.0, 400.0
FAILURE_SIGMAS = 3.0
NOT_INSTALLED = "W-DBO: not installed (pip install '.[anchors]')"


def available() -> bool:
    """The `wdbo_algo` package can be imported (the `anchors` extra is installed)."""
    return importlib.util.find_spec("wdbo_algo") is not None


def rows(wanted: bool) -> tuple[pr.Algo, ...]:
    """`(ALGO,)` when `wanted` and installed; prints `NOT_INSTALLED` when wanted but missing."""
    if not wanted:
        return ()
    if not available():
        print(NOT_INSTALLED, flush=True)
        return ()
    return (ALGO,)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch in float64 (W-DBO's model needs it) on one thread, torch and `np.random` seeded with
    `seed`; warnings off (gpytorch's numerical notes); everything restored on exit."""
    import torch

    dtype, threads, np_state = torch.get_default_dtype(), torch.get_num_threads(), \
        np.random.get_state()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        np.random.set_state(np_state)


class Session:
    """One W-DBO optimizer on the box `lower .. upper`, stepped in benchmark steps `t = 1, 2, ...`
    (told to W-DBO as `t / time_unit`), maximizing. Call inside `seeded(...)`."""

    def __init__(self, lower: Sequence[float], upper: Sequence[float], time_unit: float):
        import gpytorch
        from wdbo_algo.optimizer import WDBOOptimizer

        domain = np.column_stack([np.asarray(lower, float), np.asarray(upper, float)])
        self.opt = WDBOOptimizer(domain, gpytorch.kernels.MaternKernel,
                                 gpytorch.kernels.MaternKernel, spatial_kernel_args=[MATERN_NU],
                                 temporal_kernel_args=[MATERN_NU],
                                 n_initial_observations=INITIAL_OBSERVATIONS, alpha=ALPHA)
        self.time_unit = float(time_unit)
        self.removal_times: list[int] = []
        self.removed: list[int] = []

    def ask(self, t: int) -> np.ndarray:
        return np.asarray(self.opt.next_query(t / self.time_unit), dtype=float)

    def tell(self, x: np.ndarray, t: int, y: float) -> int:
        """Add `(x, t, y)`, then let W-DBO clean its dataset; the number of observations removed."""
        self.opt.tell(np.asarray(x, dtype=float), t / self.time_unit, float(y))
        before = self.opt.dataset_size()
        self.opt.clean(t / self.time_unit)
        gone = before - self.opt.dataset_size()
        if gone:
            self.removal_times.append(t)
            self.removed.append(gone)
        return gone

    def predict(self, x: np.ndarray, t: int) -> tuple[float, float] | None:
        """W-DBO's posterior mean and std of `f(x, t)` in the units it is told (None before its
        first model)."""
        import torch

        opt = self.opt
        if opt._gpr is None:
            return None
        z = np.concatenate([opt.normalize_x(np.asarray(x, float)), [t / self.time_unit]])
        with torch.no_grad():
            post = opt._gpr(torch.as_tensor(z[None, :]))
        mean, var = float(post.mean.reshape(-1)[0]), float(post.variance.reshape(-1)[0])
        loc, scale = float(np.mean(opt._yy)), float(np.std(opt._yy))
        return loc + scale * mean, scale * math.sqrt(max(var, 0.0))

    def standardized(self, y: float) -> float:
        """`y` on W-DBO's standardized scale (its current dataset's mean and std)."""
        s = float(np.std(self.opt._yy))
        return (y - float(np.mean(self.opt._yy))) / s if s > 0 else 0.0

    def hyperparameters(self) -> list[float] | None:
        """`[signal variance, spatial lengthscale, temporal lengthscale in steps, noise variance]`
        of the last fit (None during the initial design)."""
        o = self.opt
        if o._lS is None:
            return None
        return [round(float(v), 6) for v in (o._lambda, o._lS, o._lT * self.time_unit, o._noise)]


def run_cartpole(run: int, algo: pr.Algo, seed: int, cfg, make_plant) -> dict:
    """W-DBO on run `run`'s cart-pole for `cfg.horizon` steps, accounted as `cartpole.run_task`
    (which calls this with its `make_plant`, so this module imports no bench module back)."""
    from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

    t_start = time.process_time()
    rs = pr.run_seed(seed, run)
    plant = make_plant(rs, cfg.jump_at, cfg.profile)
    regret, points, failures, outside, optimum = [], [], 0, 0, 0.0
    with seeded(rs):
        wd = Session(DOMAIN_LOWER, DOMAIN_UPPER, CARTPOLE_TIME_UNIT)
        for t in range(1, cfg.horizon + 1):
            x = wd.ask(t)
            points.append(x.tolist())
            ev = plant.evaluate(x, t)
            optimum += ev.optimal_cost
            if ev.failed:
                failures += 1
                pred = wd.predict(x, t)  # maximizing -cost: worse = lower
                y = -plant.max_cost if pred is None else pred[0] - FAILURE_SIGMAS * pred[1]
                regret.append(plant.max_cost - ev.optimal_cost)
            else:
                y = -ev.cost * cfg.units
                regret.append(ev.regret)
            wd.tell(x, t, y)
            outside += abs(wd.standardized(y)) > 3.0
    return {"run": run, "label": algo.label, "regret": regret, "reset_times": [],
            "removal_times": wd.removal_times, "removed": wd.removed, "points": points,
            "dataset_size": wd.opt.dataset_size(), "failures": failures,
            "outside_prior": int(outside), "lengthscales": wd.hyperparameters(),
            "exploration": None,
            "realisation": {"plant_seed": rs, "optimal_cost_sum": round(optimum, 9)},
            "cpu_s": time.process_time() - t_start}


def run_within_model(F: np.ndarray, noise: np.ndarray, seed: int, points: np.ndarray,
                     to_index) -> dict:
    """W-DBO on one within-model draw `F` `(T, grid^2)` over the grid `points`: its continuous
    proposal in `[0, 1]^2` is rounded to the nearest grid point (`to_index`), which is measured and
    told (as the other rows measure); `within_model.run_algorithm` passes both."""
    idx = np.empty(len(F), dtype=int)
    with seeded(seed):
        wd = Session([0.0, 0.0], [1.0, 1.0], WITHIN_MODEL_TIME_UNIT)
        for k in range(len(F)):
            i = idx[k] = to_index(wd.ask(k + 1))
            wd.tell(points[i], k + 1, float(F[k, i] + noise[k]))
    return {"idx": idx, "reset_times": [], "removal_times": wd.removal_times,
            "dataset_size": wd.opt.dataset_size()}


def note_versions() -> dict:
    """Versions of the W-DBO stack (for results.json)."""
    from importlib.metadata import version

    return {p: version(p) for p in ("wdbo-algo", "wdbo-criterion", "torch", "gpytorch", "botorch")}

