"""A DC-motor position loop tuned by its PID gains: a plant a user would write by hand.

Motor (armature inductance neglected: the electrical pole is far faster than the mechanical one):

    J theta'' = K / R (V - K theta') - b theta' - tau_load

with `K = 0.0274 N m/A`, `R = 4 Ohm`, `b = 3.5e-6 N m s`, rotor plus load inertia `J`. A PID
controller with the derivative on the filtered measurement (no derivative kick) drives
`V = Kp e + Ki int e + Kd d/dt(-theta_f)`, saturated at +-12 V, for a 1-rad step at t = 0 and a
load-torque step at t = 0.25 s; 0.5 s at 1 kHz (semi-implicit Euler). The cost is the mean
squared tracking error plus `3e-3` times the mean squared voltage. An episode's noise: the angle
sensor's (sd 2 mrad) and the load torque's size (+-20 %). Drift: the load inertia (a coupled load
added: x3 for a large jump, x1.5 for a small one). A cost of 1 or more (no tracking at all, or an
unstable loop) is a catastrophe. The box is what a user would write: `Kp` 0.5..25 V/rad,
`Ki` 0..60 V/(rad s), `Kd` 0..1 V s/rad.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .plant import BestCostCache, Drift
from .search import search_best
from .split import SPLIT

DT, STEPS, LOAD_AT = 1e-3, 500, 250
K_T, R_A, B_F, J_0 = 0.0274, 4.0, 3.5e-6, 3.2e-5
V_MAX, TAU_LOAD, EFFORT_WEIGHT, FILTER = 12.0, 0.01, 3e-3, 0.005
#: Inertia factor of the full change per drift kind (`two-jumps` reaches level 2).
INERTIA = {"jump-small": 1.5, "jump-large": 3.0, "ramp": 3.0, "two-jumps": 3.0, "periodic": 3.0}


def simulate(gains: np.ndarray, inertia: float, noise: np.ndarray | None = None,
             load: float = 1.0) -> np.ndarray:
    """Costs of the gain rows `(n, 3)` at rotor-plus-load inertia `inertia`; `noise` `(STEPS,)`:
    the sensor noise of one episode (None: noise-free); `load`: the load torque's factor."""
    G = np.atleast_2d(np.asarray(gains, float))
    kp, ki, kd = G[:, 0], G[:, 1], G[:, 2]
    theta = np.zeros(len(G))
    omega, integ, filt = np.zeros_like(theta), np.zeros_like(theta), np.zeros_like(theta)
    err2 = np.zeros_like(theta)
    eff2 = np.zeros_like(theta)
    alpha = DT / (FILTER + DT)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(STEPS):
            meas = theta if noise is None else theta + noise[k]
            e = 1.0 - meas
            previous = filt
            filt = filt + alpha * (meas - filt)
            integ = integ + e * DT
            v = np.clip(kp * e + ki * integ - kd * (filt - previous) / DT, -V_MAX, V_MAX)
            tau = TAU_LOAD * load if k >= LOAD_AT else 0.0
            acc = (K_T / R_A * (v - K_T * omega) - B_F * omega - tau) / inertia
            omega = omega + acc * DT
            theta = theta + omega * DT
            err2 += (1.0 - theta) ** 2
            eff2 += v**2
    cost = (err2 + EFFORT_WEIGHT * eff2) / STEPS
    return np.where(np.isfinite(cost), cost, np.inf)


@dataclass
class DCMotor:
    name: str = "dc-motor"
    split: str = SPLIT["dc-motor"]
    names: tuple[str, ...] = ("Kp", "Ki", "Kd")
    drifts: tuple[str, ...] = ("none", "jump-small", "jump-large", "ramp", "two-jumps", "periodic")
    catastrophic_cost: float = 1.0
    lower: np.ndarray = field(default_factory=lambda: np.array([0.5, 0.0, 0.0]))
    upper: np.ndarray = field(default_factory=lambda: np.array([25.0, 60.0, 1.0]))
    sensor_std: float = 2e-3
    load_std: float = 0.2

    def __post_init__(self) -> None:
        self._best = BestCostCache(lambda level: search_best(
            lambda X: simulate(X, self._inertia(level)), self.lower, self.upper))

    def _level(self, t: int, drift: Drift) -> float:
        f = INERTIA.get(drift.kind, 1.0)
        return 1.0 + drift.level(t) * (f - 1.0)

    def _inertia(self, factor: float) -> float:
        return J_0 * factor

    def episode(self, gains, t, drift, rng) -> float:
        noise = rng.normal(0.0, self.sensor_std, STEPS)
        load = 1.0 + self.load_std * float(rng.uniform(-1.0, 1.0))
        return float(simulate(gains, self._inertia(self._level(t, drift)), noise, load)[0])

    def cost(self, gains, t, drift) -> float:
        return float(simulate(gains, self._inertia(self._level(t, drift)))[0])

    def best_cost(self, t, drift) -> float:
        return self._best(self._level(t, drift))
