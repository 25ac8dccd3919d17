"""Synthetic drifting functions of the time-varying BO literature, after W-DBO's protocol (Bardou
et al., NeurIPS 2024): a standard test function whose optimum moves,
`f_t(x) = f(x - level_t * shift)` plus Gaussian noise, minimized. The drift moves the optimum's location and keeps its value, so
the best cost is the function's known minimum at every step (every shifted optimum, up to twice
`shift` for `two-jumps`, stays inside the box). A `jump-small` moves it a quarter as far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .plant import Drift
from .split import SPLIT

_H3_A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
_H3_P = 1e-4 * np.array([[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547],
                         [381, 5743, 8828]])
_H3_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
#: A small jump moves the optimum this fraction of `shift`.
SMALL = 0.25


def hartmann3_f(X: np.ndarray) -> np.ndarray:
    inner = np.sum(_H3_A[None] * (X[:, None, :] - _H3_P[None]) ** 2, axis=2)
    return -np.exp(-inner) @ _H3_ALPHA


def ackley_f(X: np.ndarray) -> np.ndarray:
    from ..testfunctions import ackley

    return ackley(X)


@dataclass
class Moving:
    """`f` on the box `lower .. upper` with its optimum moved by `level * shift` (the level of the
    drift, `SMALL` times it for a small jump), noise of standard deviation `noise_std`."""

    name: str
    f: object
    lower: np.ndarray
    upper: np.ndarray
    shift: np.ndarray
    f_min: float
    noise_std: float
    catastrophic_cost: float
    drifts: tuple[str, ...] = ("none", "jump-small", "optimum-jump", "ramp", "two-jumps",
                               "periodic")
    split: str = "dev"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"x{i + 1}" for i in range(len(self.lower)))

    def offset(self, t: int, drift: Drift) -> np.ndarray:
        scale = SMALL if drift.kind == "jump-small" else 1.0
        return drift.level(t) * scale * self.shift

    def values(self, X: np.ndarray, t: int, drift: Drift) -> np.ndarray:
        return self.f(np.atleast_2d(X) - self.offset(t, drift))

    def episode(self, gains, t, drift, rng) -> float:
        return self.cost(gains, t, drift) + float(rng.normal(0.0, self.noise_std))

    def cost(self, gains, t, drift) -> float:
        return float(self.values(np.asarray(gains, float), t, drift)[0])

    def best_cost(self, t, drift) -> float:
        return self.f_min


def hartmann3() -> Moving:
    """Hartmann-3 on [0, 1]^3 (minimum -3.86278 at (0.1146, 0.5556, 0.8525)), noise sd 0.1."""
    return Moving("hartmann3", hartmann3_f, np.zeros(3), np.ones(3), np.array([0.3, -0.2, -0.3]),
                  -3.86278214782076, 0.1, catastrophic_cost=math.inf, split=SPLIT["hartmann3"])


def ackley4() -> Moving:
    """Ackley-4 on [-5, 5]^4 (minimum 0 at the origin), noise sd 0.2."""
    return Moving("ackley4", ackley_f, np.full(4, -5.0), np.full(4, 5.0),
                  np.array([1.5, -1.5, 1.0, -1.0]), 0.0, 0.2, catastrophic_cost=math.inf,
                  split=SPLIT["ackley4"])
