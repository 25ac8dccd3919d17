"""TuneControl's cart-pole, in numpy: the inverted pendulum on a cart of the TuneControl benchmark
suite (Stenger, Brunzema, Menn, von Rohr, Schoellig, Trimpe, arXiv 2609.09403; package
`tunecontrol`, `tasks/cartpole/plant.py`, `task.py` and `objectives.py`), re-implemented from
its task definition.

The plant (the package's `_inv_pendulum`): a cart whose velocity follows the input through a
first-order lag, `v' = (K u - v) / T1`, and a pole of mass `m`, length `l`, bearing friction
`mu`, with `J = m (l/2)^2 + m l^2 / 12 + m (d/2)^2 / 4` (`d` = 5 mm):

    phi'' = m g l / (2 J) sin(phi) - m l / (2 J) cos(phi) v' - mu / J phi'

integrated by classical RK4 with the input held over each 20-ms step, 1500 steps (30 s). The
controller is `u = -k . (x - r, v, phi, phi')`, saturated at +-10, tracking a cart reference `r`
of 0, -2 m (steps 100-499), +2 m (steps 500-999), 0. The 4-D task tunes all of `k`; the 2-D task
tunes the pole gains `(k_phi, k_phid)` and holds the cart gains at the continuous LQR gain of the
nominal plant (`Q = 10 I`, `R = 1`), which stay there when the plant drifts (a fixed part of the
controller). Costs, with the error `e` (the state minus the reference) over all 1500 samples:
LQR `mean(10 |e|^2 + u^2)`; ITAE `mean(t 10 |e|_1) + mean(u^2)`. The noise of an episode is the
package's `CartPoleNoise`: the initial state and every step's state get Gaussian noise of
standard deviation 5e-4.

The package has no failure state of its own: it saturates the input and keeps integrating,
whatever the pole does. A controller breaks this plant when the pole falls (`|phi|` passes
pi/2 at some step): the episode is then a catastrophe (`FALL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

DT, STEPS, U_MAX, Q_WEIGHT, R_WEIGHT = 0.02, 1500, 10.0, 10.0, 1.0
G, D_POLE = 9.81, 0.005
#: The package's noise model (`CartPoleNoise`): standard deviations of the initial state and of
#: each step's additive state noise.
INIT_STD, PROCESS_STD = 5e-4, 5e-4
#: The angle beyond which the pole has fallen (a catastrophe).
FALL = math.pi / 2
#: The gain box of each task dimension (the package's `_CARTPOLE_BOUNDS`).
BOXES = {
    2: ((-50.0, -30.0), (-10.0, -2.5)),
    4: ((-3.4, -2.0), (-8.0, -4.0), (-50.0, -30.0), (-10.0, -2.5)),
}
NAMES = ("k_x", "k_xd", "k_phi", "k_phid")


def reference(steps: int = STEPS) -> np.ndarray:
    r = np.zeros(steps)
    r[100:500], r[500:1000] = -2.0, 2.0
    return r


REFERENCE = reference().tolist()


@dataclass(frozen=True)
class Params:
    """Physical parameters (the package's nominal values)."""

    mass_pole: float = 0.0804
    length_pole: float = 0.147
    friction: float = 2.2e-3
    actuator_gain: float = 1.0
    T1: float = 1.0

    def inertia(self) -> float:
        m, l = self.mass_pole, self.length_pole
        return m * (l / 2) ** 2 + 1 / 12 * m * l**2 + 0.25 * m * (D_POLE / 2) ** 2


def lqr_gain(p: Params) -> np.ndarray:
    """The continuous LQR gain (Q = 10 I, R = 1) of the plant linearized upright; `(4,)`."""
    from scipy.linalg import solve_continuous_are

    c = p.mass_pole * p.length_pole / p.inertia()
    A = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, -1.0 / p.T1, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0],
                  [0.0, 0.5 * c / p.T1, 0.5 * c * G, -p.friction / p.inertia()]])
    B = np.array([[0.0], [p.actuator_gain / p.T1], [0.0], [-0.5 * c * p.actuator_gain / p.T1]])
    P = solve_continuous_are(A, B, Q_WEIGHT * np.eye(4), R_WEIGHT * np.eye(1))
    return (B.T @ P / R_WEIGHT).reshape(4)


_FLOAT_OPS = (math.sin, math.cos, lambda u: min(max(u, -U_MAX), U_MAX), max)
_ARRAY_OPS = (np.sin, np.cos, lambda u: np.clip(u, -U_MAX, U_MAX), np.maximum)


def _rollout(k, z, p: Params, w, ops):
    """One closed-loop episode for the gains `k` (4 floats, or 4 arrays of a batch) from the
    state `z`; `w` `(STEPS - 1, 4)` the state noise or None. Returns the LQR and ITAE costs and
    the largest `|phi|`. The same code runs on floats (one episode: numpy's per-call overhead
    would dominate) and on arrays (a batch)."""
    sin, cos, clip, vmax = ops
    k0, k1, k2, k3 = k
    x, v, phi, om = z
    m, l, J = p.mass_pole, p.length_pole, p.inertia()
    cs, cc, cf = 0.5 * m * G * l / J, 0.5 * m * l / J, p.friction / J
    ka, it1 = p.actuator_gain, 1.0 / p.T1
    h, h2, h6 = DT, 0.5 * DT, DT / 6
    ref = REFERENCE
    sq = ab = uu = 0.0
    worst = abs(phi)
    for i in range(STEPS):
        ex = x - ref[i]
        u = clip(-(k0 * ex + k1 * v + k2 * phi + k3 * om))
        uu = uu + u * u
        sq = sq + (ex * ex + v * v + phi * phi + om * om)
        ab = ab + (i * DT) * (abs(ex) + abs(v) + abs(phi) + abs(om))
        if i == STEPS - 1:
            break
        f = ka * u
        a1 = (f - v) * it1
        b1 = cs * sin(phi) - cc * cos(phi) * a1 - cf * om
        v2, p2, o2 = v + h2 * a1, phi + h2 * om, om + h2 * b1
        a2 = (f - v2) * it1
        b2 = cs * sin(p2) - cc * cos(p2) * a2 - cf * o2
        v3, p3, o3 = v + h2 * a2, phi + h2 * o2, om + h2 * b2
        a3 = (f - v3) * it1
        b3 = cs * sin(p3) - cc * cos(p3) * a3 - cf * o3
        v4, p4, o4 = v + h * a3, phi + h * o3, om + h * b3
        a4 = (f - v4) * it1
        b4 = cs * sin(p4) - cc * cos(p4) * a4 - cf * o4
        x = x + h6 * (v + 2 * v2 + 2 * v3 + v4)
        v = v + h6 * (a1 + 2 * a2 + 2 * a3 + a4)
        phi = phi + h6 * (om + 2 * o2 + 2 * o3 + o4)
        om = om + h6 * (b1 + 2 * b2 + 2 * b3 + b4)
        if w is not None:
            x, v, phi, om = x + w[i][0], v + w[i][1], phi + w[i][2], om + w[i][3]
        worst = vmax(worst, abs(phi))
    lqr = (Q_WEIGHT * sq + R_WEIGHT * uu) / STEPS
    itae = (Q_WEIGHT * ab + R_WEIGHT * uu) / STEPS
    return lqr, itae, worst


def simulate(gains: np.ndarray, p: Params, noise: np.ndarray | None = None):
    """Episodes of the full gain rows `gains` `(n, 4)`. `noise` `(STEPS, 4)`: one episode's
    initial state (row 0) and state noise (rows 1..), None: noise-free from rest. Returns
    `(lqr, itae, max |phi|)`, each `(n,)`."""
    K = np.atleast_2d(np.asarray(gains, dtype=float))
    z = np.zeros(4) if noise is None else np.asarray(noise[0], float)
    w = None if noise is None else np.asarray(noise[1:], float).tolist()
    if len(K) == 1:
        out = _rollout(K[0].tolist(), z.tolist(), p, w, _FLOAT_OPS)
        return tuple(np.array([float(v)]) for v in out)
    with np.errstate(over="ignore", invalid="ignore"):
        out = _rollout(tuple(K.T), tuple(np.full(len(K), c) for c in z), p, w, _ARRAY_OPS)
    return tuple(np.asarray(v, float) for v in out)


def episode_noise(rng: np.random.Generator) -> np.ndarray:
    """One episode's noise for `simulate`, after the package's noise model."""
    return np.vstack([rng.normal(0.0, INIT_STD, (1, 4)),
                      rng.normal(0.0, PROCESS_STD, (STEPS - 1, 4))])


def full_gains(X: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Task gains `(n, d)` completed by the fixed leading gains `prefix` to `(n, 4)`."""
    X = np.atleast_2d(np.asarray(X, float))
    fixed = np.broadcast_to(np.asarray(prefix, float)[: 4 - X.shape[1]], (len(X), 4 - X.shape[1]))
    return np.hstack([fixed, X])


def scaled(p: Params, **factors: float) -> Params:
    """`p` with each named parameter multiplied by its factor."""
    return replace(p, **{k: getattr(p, k) * f for k, f in factors.items()})
