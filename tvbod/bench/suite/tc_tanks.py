"""TuneControl's cascaded tanks, in numpy: the PI level loop of the TuneControl benchmark suite
(Stenger, Brunzema, Menn, von Rohr, Schoellig, Trimpe, arXiv 2609.09403; package `tunecontrol`,
`tasks/cascaded_tank/plant.py`, `config.py`, `task.py` and `objectives.py`), re-implemented from
its task definition.

Two tanks in cascade: a pump fills the upper one, which drains through its outlet into the lower
one, which drains through its own. Torricelli outflows make the plant nonlinear; with the levels
`h1, h2` clipped below at 0 for the flows, the package's Euler step of `dt = 4 s` is

    h1+ = h1 + dt / 4 (-k1 sqrt(h1) + k4 u)
    h2+ = h2 + dt / 4 ( k2 sqrt(h1) - k3 sqrt(h2))

and both levels are clipped to the tanks, `[0, 10]` (the package's only failure handling: water
above the rim is lost). A PI controller on the lower level, `u = max(kp e + ki sum e, 0)` with
`e = 4 - h2` (the integral sums the errors of every sample so far, the current one included),
runs 250 steps (1000 s) from the levels `(5.8113, 1.9440)`. The gain box is the package's:
`kp` 0.9..4.5, `ki` 0.01..0.16. Costs over the 251 samples: SSE `sum(e^2) / 2`; LogSSE its log
(floored at 1e-12); Quadratic `mean(e^2 + u^2)`. The noise of an episode is the package's
`CascadedTankNoise`: Gaussian noise of standard deviation 0.005 on both levels after every step.

A controller breaks this plant when a tank overflows (a level passes its rim before the clip):
the episode is then a catastrophe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TIME_STEP, DURATION, RIM = 4.0, 1000.0, 10.0
STEPS = int(math.ceil(DURATION / TIME_STEP))
NOISE_STD = 0.005
BOX = ((0.9, 4.5), (0.01, 0.16))
NAMES = ("kp", "ki")
OBJECTIVES = ("sse", "logsse", "quadratic")


@dataclass(frozen=True)
class Params:
    """Outlet and pump coefficients (the package's `CascadedTankDynamics`), the lower level's
    target and the initial levels."""

    k1: float = 0.2143
    k2: float = 0.2165
    k3: float = 0.1654
    k4: float = 0.1371
    target: float = 4.0
    initial: tuple[float, float] = (5.8113, 1.9440)


_FLOAT_OPS = (math.sqrt, max, min)
_ARRAY_OPS = (np.sqrt, np.maximum, np.minimum)


def _rollout(kp, ki, p: Params, noise, ops):
    """One episode for the gains `kp, ki` (floats, or arrays of a batch); `noise` `(STEPS, 2)` as
    nested lists or None. Returns the SSE, the quadratic cost and the highest level before the
    clip. The same code runs on floats (one episode: numpy's per-call overhead would dominate)
    and on arrays (a batch)."""
    sqrt, vmax, vmin = ops
    h1, h2 = p.initial
    c = TIME_STEP / 4
    integral = sse = quad = 0.0
    top = max(h1, h2)
    for i in range(STEPS + 1):
        e = p.target - h2
        integral = integral + e
        u = vmax(kp * e + ki * integral, 0.0)
        sse = sse + e * e
        quad = quad + (e * e + u * u)
        if i == STEPS:
            break
        h1, h2 = vmax(h1, 0.0), vmax(h2, 0.0)
        s1 = sqrt(h1)
        n1 = h1 + c * (-p.k1 * s1 + p.k4 * u)
        n2 = h2 + c * (p.k2 * s1 - p.k3 * sqrt(h2))
        if noise is not None:
            n1, n2 = n1 + noise[i][0], n2 + noise[i][1]
        top = vmax(top, vmax(n1, n2))
        h1, h2 = vmin(vmax(n1, 0.0), RIM), vmin(vmax(n2, 0.0), RIM)
    return 0.5 * sse, quad / (STEPS + 1), top


def simulate(gains: np.ndarray, p: Params, noise: np.ndarray | None = None):
    """Episodes of the gain rows `gains` `(n, 2)`; `noise` `(STEPS, 2)`: one episode's level
    noise, None: noise-free. Returns `(sse, quadratic, highest level before the clip)`, each
    `(n,)` (LogSSE is `log_sse(sse)`)."""
    K = np.atleast_2d(np.asarray(gains, dtype=float))
    w = None if noise is None else np.asarray(noise, float).tolist()
    if len(K) == 1:
        out = _rollout(float(K[0, 0]), float(K[0, 1]), p, w, _FLOAT_OPS)
    else:
        out = _rollout(K[:, 0], K[:, 1], p, w, _ARRAY_OPS)
    return tuple(np.broadcast_to(np.asarray(v, float), (len(K),)).copy() for v in out)


def log_sse(sse: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(sse, 1e-12))


def objective(name: str, sse: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """The cost `name` (one of OBJECTIVES) from `simulate`'s sums."""
    if name == "sse":
        return sse
    if name == "logsse":
        return log_sse(sse)
    if name == "quadratic":
        return quad
    raise ValueError(f"tank objective {name!r} is not one of {', '.join(OBJECTIVES)}")


def episode_noise(rng: np.random.Generator) -> np.ndarray:
    """One episode's level noise for `simulate`, after the package's noise model."""
    return rng.normal(0.0, NOISE_STD, (STEPS, 2))
