"""What a plant of the drift benchmark suite is: a box of gains, a noisy episode cost that may
drift with the step `t`, and what the suite needs to score a run (regret, detection, catastrophes).

A plant is pure numpy: `episode` is a function of the gains, the step, the drift and a generator,
nothing else, so a run is reproducible from its seed on any worker. Costs are minimized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

#: The drift kinds of the suite (`Drift.kind`).
DRIFT_KINDS = ("none", "jump-small", "jump-large", "ramp", "two-jumps", "periodic",
               "optimum-jump")
SPLITS = ("dev", "held-out")


@dataclass(frozen=True)
class Drift:
    """How a plant changes over the steps of a run: `kind` (one of DRIFT_KINDS), the step the
    change starts at (`at`; `two-jumps`: also `second`), a ramp's length, a periodic drift's
    period. `level(t)` in [0, 1] says how far the change has gone at step `t` (0: the nominal
    plant, 1: the full change); each plant maps that to its own physical parameter."""

    kind: str = "none"
    at: int = 100
    second: int = 200
    ramp_steps: int = 100
    period: int = 100

    def __post_init__(self) -> None:
        if self.kind not in DRIFT_KINDS:
            raise ValueError(f"drift kind {self.kind!r} is not one of {', '.join(DRIFT_KINDS)}")

    def level(self, t: int) -> float:
        k = self.kind
        if k == "none":
            return 0.0
        if k in ("jump-small", "jump-large", "optimum-jump"):
            return 1.0 if t >= self.at else 0.0
        if k == "ramp":
            return float(np.clip((t - self.at) / self.ramp_steps, 0.0, 1.0))
        if k == "two-jumps":
            return 0.0 if t < self.at else (1.0 if t < self.second else 2.0)
        return 0.5 - 0.5 * np.cos(2.0 * np.pi * max(t - self.at, 0) / self.period)  # periodic

    def change_steps(self) -> tuple[int, ...]:
        """The steps where an abrupt change happens (detection is scored at these)."""
        if self.kind in ("jump-small", "jump-large", "optimum-jump"):
            return (self.at,)
        if self.kind == "two-jumps":
            return (self.at, self.second)
        return ()


class SuitePlant(Protocol):
    """One plant of the suite."""

    name: str
    split: str  # "dev" or "held-out" (SPLITS)
    names: tuple[str, ...]  # gain names, one per dimension
    lower: np.ndarray  # (d,) the gain box a user would write
    upper: np.ndarray
    drifts: tuple[str, ...]  # the DRIFT_KINDS this plant supports
    catastrophic_cost: float  # an episode cost at or above this is a catastrophe (e.g. a fall)

    def episode(self, gains: np.ndarray, t: int, drift: Drift,
                rng: np.random.Generator) -> float:
        """The measured (noisy) cost of one episode with `gains` at step `t`."""

    def cost(self, gains: np.ndarray, t: int, drift: Drift) -> float:
        """The noise-free cost (for regret)."""

    def best_cost(self, t: int, drift: Drift) -> float:
        """The lowest noise-free cost over the box at step `t` (cached per drift level)."""


@dataclass
class BestCostCache:
    """`best_cost` per drift level, computed once by `search(level)` and kept: every step of a
    regime shares its optimum. The level may also be any hashable description of the plant at
    that step (e.g. a frozen dataclass of its physical parameters); a number is rounded."""

    search: object
    values: dict = field(default_factory=dict)

    def __call__(self, level) -> float:
        key = round(float(level), 6) if isinstance(level, (int, float)) else level
        if key not in self.values:
            self.values[key] = float(self.search(key))
        return self.values[key]
