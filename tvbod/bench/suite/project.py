"""The project's own plants in the suite: the cart-pole of `tvbod bench cartpole` and the Intel
Lab temperature data of `tvbod bench temperature`, each a `SuitePlant`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .plant import Drift
from .split import SPLIT


#: Friction factor of the full change per drift kind (a level of 1); `two-jumps` reaches level 2.
CARTPOLE_FRICTION = {"jump-small": 1.5, "jump-large": 2.5, "ramp": 2.5, "two-jumps": 2.5,
                     "periodic": 2.5}


@dataclass
class CartPole:
    """The project's linearized cart-pole (plant_adapters/cartpole/dynamics.py): four gains in
    the paper's box, the cost of one noisy 20-s episode, the bearing friction drifting as
    `tvbod bench cartpole`'s (x2.5 for a large jump; x1.5 for a small one). An episode above the
    plant's `max_cost` (or unstable) is a catastrophe."""

    name: str = "cartpole"
    split: str = SPLIT["cartpole"]
    names: tuple[str, ...] = ("k_x", "k_xd", "k_phi", "k_phid")
    drifts: tuple[str, ...] = ("none", "jump-small", "jump-large", "ramp", "two-jumps",
                               "periodic")
    catastrophic_cost: float = 100.0
    optima: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

        self.lower, self.upper = np.array(DOMAIN_LOWER), np.array(DOMAIN_UPPER)

    def params(self, t: int, drift: Drift):
        from plant_adapters.cartpole.dynamics import CartPoleParams

        p = CartPoleParams()
        factor = CARTPOLE_FRICTION.get(drift.kind, 1.0)
        return replace(p, friction=p.friction * (1.0 + drift.level(t) * (factor - 1.0)))

    def episode(self, gains, t, drift, rng) -> float:
        from plant_adapters.cartpole.dynamics import STEPS, X0, _cost

        p = self.params(t, drift)
        W = rng.normal(0.0, p.noise_std, size=(STEPS - 1, 4))
        return _cost(np.asarray(gains, float).reshape(4), p, W, STEPS, X0)

    def cost(self, gains, t, drift) -> float:
        from plant_adapters.cartpole.dynamics import closed_loop_cost

        return closed_loop_cost(gains, self.params(t, drift), noise_seed=None)

    def best_cost(self, t, drift) -> float:
        """The LQR gain's noise-free cost (it lies inside the box at every friction used)."""
        from plant_adapters.cartpole.dynamics import lqr_gain

        p = self.params(t, drift)
        if p.friction not in self.optima:
            self.optima[p.friction] = lqr_gain(p)[1]
        return self.optima[p.friction]


# ---------------------------------------------------------------------- temperature data
@dataclass
class Temperature:
    """The Intel Lab sensors (`tvbod bench temperature`'s data): pick one of 50 sensors a step,
    the cost is minus its standardized temperature. The test days are replayed cyclically from a
    start offset drawn from the run's seed (`for_run`), and every reading carries sensor noise of
    standard deviation `noise_std`, so runs differ beyond their first proposal. The drift is the
    data's own (the day's cycle): the only drift kind is `periodic`, and it drifts from t = 1
    (`drift_start`)."""

    name: str = "temperature"
    split: str = SPLIT["temperature"]
    names: tuple[str, ...] = ("sensor",)
    drifts: tuple[str, ...] = ("periodic",)
    catastrophic_cost: float = float("inf")
    noise_std: float = 0.1
    start: int = 0
    drift_start: int = 1

    def __post_init__(self) -> None:
        from ..temperature import plant_data

        self.kernel, self.data = plant_data()
        self.arms = int(self.data.shape[0])
        self.lower, self.upper = np.zeros(1), np.array([self.arms - 1.0])

    def for_run(self, seed: int) -> Temperature:
        start = int(np.random.default_rng([seed, 1]).integers(self.data.shape[1]))
        return replace(self, start=start)

    def _column(self, t: int) -> np.ndarray:
        return self.data[:, (self.start + t - 1) % self.data.shape[1]]

    def episode(self, gains, t, drift, rng) -> float:
        return self.cost(gains, t, drift) + float(rng.normal(0.0, self.noise_std))

    def cost(self, gains, t, drift) -> float:
        return -float(self._column(t)[int(np.asarray(gains).reshape(-1)[0])])

    def best_cost(self, t, drift) -> float:
        return -float(self._column(t).max())
