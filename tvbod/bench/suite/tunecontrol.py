"""The TuneControl family of the suite: TuneControl's cart-pole (2-D and 4-D gains, LQR and ITAE
tracking costs) and its cascaded tanks (a PI loop), as fast numpy plants (`tc_cartpole`,
`tc_tanks`) that give the package's own costs (Stenger, Brunzema, Menn, von Rohr, Schoellig,
Trimpe, arXiv 2609.09403; package `tunecontrol`, MIT licence). Each task keeps the package's gain
box, dynamics, integration scheme, horizon, reference and noise model; what the suite adds is the
drift, the catastrophe and the best cost.

Drift (`Drift.level(t)`: 0 nominal, 1 the full change, 2 the second jump of `two-jumps`) scales
physical parameters; a factor `f` at the full change is `1 + level (f - 1)`:

| kind | cart-pole | tanks |
| --- | --- | --- |
| jump-large, ramp, periodic | pole friction x2.5 | lower outlet x0.7 (partly clogged) |
| jump-small | actuator gain x(1 - `small`) | lower outlet x(1 - `small`) |
| two-jumps | friction x2.5, then also pole mass +50 % | lower outlet x0.7, then upper too |
| optimum-jump | actuator gain -30 % | the lower level's target 4 -> 3 |

A small jump is near detectability by definition: it moves the noise-free cost of the nominal
optimum by `SMALL_SIGMAS` (3) standard deviations of the episode noise there; `small` is that
fraction, per task (a test checks the definition). The optimum jumps of the suite's plants
(`PLANTS`) move the optimal gains by a sizeable part of the box, not only the cost; the tanks'
Quadratic cost is dominated by the pump input, and no drift moves its optimum far. In the 2-D
cart-pole the cart gains are a fixed part of the controller: they stay at the nominal plant's
LQR gain when the plant drifts.

A controller that breaks the plant (the pole falls; a tank overflows) costs at least the plant's
`catastrophic_cost`, and an episode that keeps the plant whole costs less; see `tc_cartpole` and
`tc_tanks` for how each is defined from the package's own behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import tc_cartpole as cp
from . import tc_tanks as tk
from .plant import BestCostCache, Drift

#: A small jump moves the nominal optimum's noise-free cost by this many noise sds.
SMALL_SIGMAS = 3.0
#: The drift kinds the family supports.
DRIFTS = ("none", "jump-small", "jump-large", "ramp", "two-jumps", "periodic", "optimum-jump")
#: The full change per drift kind: `(first, second)`, each {parameter: factor}; `small` stands
#: for the task's small-jump fraction (a factor of `1 - small`).
CARTPOLE_DRIFT = {
    "jump-large": ({"friction": 2.5}, {}),
    "ramp": ({"friction": 2.5}, {}),
    "periodic": ({"friction": 2.5}, {}),
    "jump-small": ({"actuator_gain": "small"}, {}),
    "two-jumps": ({"friction": 2.5}, {"mass_pole": 1.5}),
    "optimum-jump": ({"actuator_gain": 0.7}, {}),
}
TANK_DRIFT = {
    "jump-large": ({"k3": 0.7}, {}),
    "ramp": ({"k3": 0.7}, {}),
    "periodic": ({"k3": 0.7}, {}),
    "jump-small": ({"k3": "small"}, {}),
    "two-jumps": ({"k3": 0.7}, {"k1": 0.7, "k2": 0.7}),
    "optimum-jump": ({"target": 0.75}, {}),
}


def drifted(base, table: dict, drift: Drift, t: int, small: float):
    """The parameters `base` at step `t` of `drift`, after the family's `table`."""
    if drift.kind not in table:
        return base
    first, second = table[drift.kind]
    level = drift.level(t)
    factors: dict = {}
    for stage, amount in ((first, min(level, 1.0)), (second, max(level - 1.0, 0.0))):
        for name, f in stage.items():
            f = 1.0 - small if f == "small" else f
            factors[name] = factors.get(name, 1.0) * (1.0 + amount * (f - 1.0))
    return replace(base, **{k: getattr(base, k) * f for k, f in factors.items()})


def polished_best(f, lower: np.ndarray, upper: np.ndarray, points: int, starts: int = 4) -> float:
    """The lowest value of the vectorized `f` over the box: a scrambled Sobol screen (seed 0),
    then scipy's L-BFGS-B from the `starts` best points. A gradient polish, not
    `search.search_best`'s random perturbations: the cart-pole's optima lie on narrow curved
    valleys and box faces, where the perturbations stop short of the floor."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    X = lower + qmc.Sobol(len(lower), scramble=True, seed=0).random(points) * (upper - lower)
    v = f(X)
    best = float(np.min(v))
    for x0 in X[np.argsort(v, kind="stable")[:starts]]:
        r = minimize(lambda x: float(f(x[None])[0]), x0, method="L-BFGS-B",
                     bounds=list(zip(lower, upper)))
        best = min(best, float(r.fun))
    return best


@dataclass
class _Task:
    """What the cart-pole and tank tasks share: the episode, noise-free and best costs from a
    batch cost function `costs(X, params, noise)` that already applies the catastrophe floor."""

    name: str
    objective: str
    lower: np.ndarray
    upper: np.ndarray
    names: tuple[str, ...]
    small: float
    catastrophic_cost: float
    split: str = "held-out"
    drifts: tuple[str, ...] = DRIFTS
    best_points: int = 1024
    _best: BestCostCache = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.lower, self.upper = np.asarray(self.lower, float), np.asarray(self.upper, float)
        self._best = BestCostCache(lambda p: polished_best(
            lambda X: self.costs(X, p), self.lower, self.upper, self.best_points))

    def episode(self, gains, t: int, drift: Drift, rng: np.random.Generator) -> float:
        return float(self.costs(gains, self.params(t, drift), self.noise(rng))[0])

    def cost(self, gains, t: int, drift: Drift) -> float:
        return float(self.costs(gains, self.params(t, drift))[0])

    def best_cost(self, t: int, drift: Drift) -> float:
        """The lowest noise-free cost over the box (`polished_best`), once per distinct
        parameter set."""
        return self._best(self.params(t, drift))


@dataclass
class TCCartPole(_Task):
    """TuneControl's cart-pole task `dim`-D with the cost `objective` ("lqr" or "itae")."""

    dim: int = 4
    prefix: np.ndarray = field(default_factory=lambda: cp.lqr_gain(cp.Params()), repr=False)

    def params(self, t: int, drift: Drift) -> cp.Params:
        return drifted(cp.Params(), CARTPOLE_DRIFT, drift, t, self.small)

    def noise(self, rng: np.random.Generator) -> np.ndarray:
        return cp.episode_noise(rng)

    def raw(self, X, p: cp.Params, noise=None) -> tuple[np.ndarray, np.ndarray]:
        """The package's cost of the task gains `X` `(n, dim)` and whether the pole fell."""
        lqr, itae, worst = cp.simulate(cp.full_gains(X, self.prefix), p, noise)
        return (lqr if self.objective == "lqr" else itae), worst > cp.FALL

    def costs(self, X, p: cp.Params, noise=None) -> np.ndarray:
        c, fell = self.raw(X, p, noise)
        return np.where(fell, np.maximum(c, self.catastrophic_cost), c)


@dataclass
class TCTank(_Task):
    """TuneControl's cascaded tanks with the cost `objective` (one of `tc_tanks.OBJECTIVES`)."""

    def params(self, t: int, drift: Drift) -> tk.Params:
        return drifted(tk.Params(), TANK_DRIFT, drift, t, self.small)

    def noise(self, rng: np.random.Generator) -> np.ndarray:
        return tk.episode_noise(rng)

    def raw(self, X, p: tk.Params, noise=None) -> tuple[np.ndarray, np.ndarray]:
        """The package's cost of the gains `X` `(n, 2)` and whether a tank overflowed."""
        sse, quad, top = tk.simulate(X, p, noise)
        return tk.objective(self.objective, sse, quad), top > tk.RIM

    def costs(self, X, p: tk.Params, noise=None) -> np.ndarray:
        c, spilled = self.raw(X, p, noise)
        return np.where(spilled, np.maximum(c, self.catastrophic_cost), c)


def tank_bound(objective: str) -> float:
    """The highest cost the package's tanks can give while they keep their water: the levels
    are clipped to `[0, RIM]`, so every error is at most `RIM` and every input at most the
    box's largest gains on it. An overflow costs this bound."""
    n = tk.STEPS + 1
    (kp_hi, ki_hi) = (hi for _, hi in tk.BOX)
    sse = 0.5 * n * tk.RIM**2
    if objective == "quadratic":
        return tk.RIM**2 + (kp_hi * tk.RIM + ki_hi * n * tk.RIM) ** 2
    return float(np.log(sse)) if objective == "logsse" else sse


#: The catastrophe floor of the cart-pole costs: far above any upright episode's cost on the
#: box at every drift used, far below any fallen one's (`tests/bench/test_suite_tunecontrol.py`
#: checks the gap).
CARTPOLE_CATASTROPHE = {"lqr": 1000.0, "itae": 2000.0}
#: The small-jump fraction per task (`SMALL_SIGMAS`; the test recomputes the definition).
SMALL = {"tc-cartpole-2d-lqr": 0.044, "tc-cartpole-2d-itae": 0.153, "tc-cartpole-4d-lqr": 0.046,
         "tc-cartpole-4d-itae": 0.111, "tc-tank-sse": 0.051, "tc-tank-logsse": 0.052,
         "tc-tank-quadratic": 0.005}


def cartpole(dim: int, objective: str) -> TCCartPole:
    name = f"tc-cartpole-{dim}d-{objective}"
    lower, upper = np.array(cp.BOXES[dim]).T
    return TCCartPole(name=name, objective=objective, lower=lower, upper=upper,
                      names=cp.NAMES[4 - dim:], small=SMALL[name],
                      catastrophic_cost=CARTPOLE_CATASTROPHE[objective], dim=dim)


def tank(objective: str = "sse") -> TCTank:
    name = f"tc-tank-{objective}"
    lower, upper = np.array(tk.BOX).T
    return TCTank(name=name, objective=objective, lower=lower, upper=upper, names=tk.NAMES,
                  small=SMALL[name], catastrophic_cost=tank_bound(objective))


#: Every task of the family, by suite name.
FAMILY = {
    **{f"tc-cartpole-{d}d-{o}": (lambda d=d, o=o: cartpole(d, o))
       for d in (2, 4) for o in ("lqr", "itae")},
    **{f"tc-tank-{o}": (lambda o=o: tank(o)) for o in tk.OBJECTIVES},
}
#: The family's plants in the suite: both cart-pole sizes with both tracking costs and the tanks
#: with the package's default cost (the tanks' other costs are in `FAMILY`).
PLANTS = {n: FAMILY[n] for n in ("tc-cartpole-2d-lqr", "tc-cartpole-2d-itae",
                                 "tc-cartpole-4d-lqr", "tc-cartpole-4d-itae", "tc-tank-sse")}

__all__ = ["FAMILY", "PLANTS", "SMALL_SIGMAS", "TCCartPole", "TCTank", "cartpole", "drifted",
           "polished_best", "tank", "tank_bound"]
