"""Linearized cart-pole with a velocity-controlled cart: the ET-GP-UCB policy-search benchmark.

Model (Brunzema, von Rohr, Trimpe, CDC 2022; used in Brunzema et al., arXiv 2208.10790, Sec. VI).
State `x = [s, s_dot, phi, phi_dot]` (cart position, cart velocity, pole angle from upright, pole
angular velocity); the input `u` is a cart velocity set-point tracked through a first-order lag:

    s_ddot   = (K_u u - s_dot) / T_1
    phi_ddot = 0.5 m_p g l / J sin(phi) - 0.5 m_p l / J cos(phi) s_ddot - mu / J phi_dot
    J        = m_p (l/2)^2 + m_p l^2 / 12 + 0.25 m_p (d/2)^2

Linearized about the upright rest (`sin phi ~ phi`, `cos phi ~ 1`) with `a = 0.5 m_p g l / J`,
`b = 0.5 m_p l / J`:

    A = [[0, 1,     0, 0    ],        B = [[0         ],
         [0, -1/T_1, 0, 0    ],             [K_u/T_1   ],
         [0, 0,     0, 1    ],             [0         ],
         [0, b/T_1, a, -mu/J]]             [-b K_u/T_1]]

and sampled with a zero-order hold, `Ad = e^{A Ts}`, `Bd = int_0^Ts e^{A s} ds B` (`Ts = 0.02 s`).

Controller and cost. `u_k = -K x_k` with `K` in `(-inf, 0)^4` (paper domain `DOMAIN_LOWER` ..
`DOMAIN_UPPER`); the closed loop `x_{k+1} = (Ad - Bd K) x_k + w_k`, `w_k ~ N(0, sigma_w^2 I)`, runs
`N = 1000` steps (20 s) from `x_0 = [4, 0, 0.1, -0.01]` and costs

    J(K) = 1/N sum_{k=0}^{N-1} (x_k' Q x_k + u_k' R u_k),    Q = 10 I, R = 1.

Step 0 is counted (it is `~294` of the `~14084` sum for the LQR gain); counting steps 1..N instead
gives 13.79 rather than the issue's 14.08. The noise of one evaluation is drawn from
`default_rng([seed, t])`, so every optimizer sees the same noise at the same time step `t`
(common random numbers), and the regret `J_t(K) - J_t(K*_t)` is computed with one realisation.

The optimum `K*` solves the discrete algebraic Riccati equation for `(Ad, Bd, Q, R)`:
`K* = (R + Bd' P Bd)^{-1} Bd' P Ad`. It minimizes the infinite-horizon cost from every `x_0` and the
stationary noise cost `tr(P W)`, hence (up to the negligible tail after 20 s) the noise-free `J`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.linalg import expm, solve_discrete_are

#: Paper domain of the four gains `[k_s, k_s_dot, k_phi, k_phi_dot]` (all negative).
DOMAIN_LOWER: tuple[float, ...] = (-3.0, -6.0, -50.0, -4.0)
DOMAIN_UPPER: tuple[float, ...] = (-2.0, -4.0, -25.0, -2.0)
#: Initial state `x_0 = [s, s_dot, phi, phi_dot]`.
X0: tuple[float, ...] = (4.0, 0.0, 0.1, -0.01)
#: Steps per evaluation (20 s at `Ts = 0.02 s`).
STEPS = 1000


@dataclass(frozen=True)
class CartPoleParams:
    """Physical constants, sampling, cost weights and process noise (SI units).

    `friction` is the bearing friction `mu` [N m s]; the time-varying benchmark changes only it.
    `inertia` is `J = m_p (l/2)^2 + m_p l^2 / 12 + 0.25 m_p (d/2)^2` [kg m^2]."""

    pole_mass: float = 0.0804          # m_p [kg]
    pole_length: float = 0.147         # l [m]
    input_gain: float = 1.0            # K_u
    lag: float = 1.0                   # T_1 [s]
    gravity: float = 9.81              # g [m/s^2]
    pole_diameter: float = 0.005       # d [m]
    friction: float = 2.2e-3           # mu [N m s]
    sample_time: float = 0.02          # Ts [s]
    state_weight: float = 10.0         # Q = state_weight * I
    input_weight: float = 1.0          # R = input_weight
    noise_std: float = 6e-4            # sigma_w, per state and step

    def __post_init__(self) -> None:
        positive = ("pole_mass", "pole_length", "input_gain", "lag", "gravity", "sample_time",
                    "state_weight", "input_weight")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"CartPoleParams.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("pole_diameter", "friction", "noise_std"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"CartPoleParams.{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def inertia(self) -> float:
        m, l, d = self.pole_mass, self.pole_length, self.pole_diameter
        return m * (l / 2) ** 2 + m * l**2 / 12 + 0.25 * m * (d / 2) ** 2


def linear_model(params: CartPoleParams) -> tuple[np.ndarray, np.ndarray]:
    """Continuous linearization `x_dot = A x + B u` about upright: `A` `(4, 4)`, `B` `(4, 1)`."""
    p, J = params, params.inertia
    a = 0.5 * p.pole_mass * p.gravity * p.pole_length / J
    b = 0.5 * p.pole_mass * p.pole_length / J
    A = np.array([[0.0, 1.0, 0.0, 0.0],
                  [0.0, -1.0 / p.lag, 0.0, 0.0],
                  [0.0, 0.0, 0.0, 1.0],
                  [0.0, b / p.lag, a, -p.friction / J]])
    B = np.array([[0.0], [p.input_gain / p.lag], [0.0], [-b * p.input_gain / p.lag]])
    return A, B


def discretize(A: np.ndarray, B: np.ndarray, Ts: float) -> tuple[np.ndarray, np.ndarray]:
    """Zero-order hold: `expm([[A, B], [0, 0]] Ts) = [[Ad, Bd], [0, I]]` (Van Loan)."""
    n, m = B.shape
    M = np.zeros((n + m, n + m))
    M[:n, :n], M[:n, n:] = A, B
    E = expm(M * Ts)
    return E[:n, :n], E[:n, n:]


@lru_cache(maxsize=1024)
def _discrete(params: CartPoleParams) -> tuple[np.ndarray, np.ndarray]:
    Ad, Bd = discretize(*linear_model(params), params.sample_time)
    Ad.setflags(write=False)
    Bd.setflags(write=False)
    return Ad, Bd


def process_noise(params: CartPoleParams, noise_seed: tuple[int, ...] | None,
                  steps: int = STEPS) -> np.ndarray | None:
    """`w_0 .. w_{N-2}` `(N-1, 4)` from `default_rng(noise_seed)`; `None` for a noise-free run."""
    if noise_seed is None or params.noise_std == 0:
        return None
    rng = np.random.default_rng(list(noise_seed))
    return rng.normal(0.0, params.noise_std, size=(steps - 1, 4))


def _trajectory(Acl: np.ndarray, x0: np.ndarray, W: np.ndarray | None, steps: int) -> np.ndarray:
    """States `(N, 4)` of `x_{k+1} = Acl x_k + w_k` by a doubling (Hillis-Steele) scan, not a loop.

    `x_k = sum_{j<=k} Acl^{k-j} v_j` with `v_0 = x_0`, `v_j = w_{j-1}`. Start `y = v`; the pass
    with shift `s = 1, 2, 4, ..` does `y_k += Acl^s y_{k-s}`, after which `y_k` holds the terms
    `j > k - 2s`. `log2 N` passes of an `(N, 4) x (4, 4)` product: ~0.2 ms for N = 1000, against
    ~3-8 ms for a Python loop, and small enough never to wake a threaded BLAS (a block-Toeplitz
    version was 30x slower on a loaded 2-core host for that reason). Exact up to round-off;
    overflows to inf/nan when the loop is unstable."""
    y = np.zeros((steps, 4))
    y[0] = x0
    if W is not None:
        y[1:] = W[: steps - 1]
    P, s = Acl, 1
    while s < steps:
        y[s:] += y[:-s] @ P.T
        P, s = P @ P, 2 * s
    return y


def closed_loop_cost(K: np.ndarray, params: CartPoleParams, *,
                     noise_seed: tuple[int, ...] | None, steps: int = STEPS,
                     x0: tuple[float, ...] | np.ndarray = X0) -> float:
    """`J(K) = 1/N sum_{k<N} x_k'Q x_k + u_k'R u_k` with `u_k = -K x_k`, `K` `(4,)`.

    `noise_seed=None` runs noise-free; otherwise the noise is `process_noise(params, noise_seed)`.
    Returns `math.inf` (never nan) when the trajectory leaves the floats (unstable gains)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    W = process_noise(params, noise_seed, steps)
    return _cost(np.asarray(K, dtype=float).reshape(4), params, W, steps, x0)


def _cost(K: np.ndarray, params: CartPoleParams, W: np.ndarray | None, steps: int,
          x0: tuple[float, ...] | np.ndarray) -> float:
    Ad, Bd = _discrete(params)
    # u = -K x, so x'Qx + u'Ru = x' (Q + R K'K) x
    M = params.state_weight * np.eye(4) + params.input_weight * np.outer(K, K)
    with np.errstate(over="ignore", invalid="ignore"):
        X = _trajectory(Ad - Bd @ K[None, :], np.asarray(x0, dtype=float), W, steps)
        J = float(np.einsum("ki,ij,kj->", X, M, X)) / steps
    return J if math.isfinite(J) else math.inf


def lqr_gain(params: CartPoleParams, *, steps: int = STEPS,
             x0: tuple[float, ...] | np.ndarray = X0) -> tuple[np.ndarray, float]:
    """`(K*, J*)`: DARE gain `K* = (R + Bd'P Bd)^{-1} Bd'P Ad` `(4,)` and its noise-free cost."""
    Ad, Bd = _discrete(params)
    Q, R = params.state_weight * np.eye(4), np.array([[params.input_weight]])
    P = solve_discrete_are(Ad, Bd, Q, R)
    K = np.linalg.solve(R + Bd.T @ P @ Bd, Bd.T @ P @ Ad).reshape(4)
    return K, closed_loop_cost(K, params, noise_seed=None, steps=steps, x0=x0)


@dataclass(frozen=True)
class FrictionProfile:
    """Bearing friction over optimizer steps `t`: `mu_t = base * g(t)`.

    - `constant`: `g(t) = 1`.
    - `jump`:     `g(t) = 1` for `t < t0`, `factor` for `t >= t0` (paper: factor 2.5 at t0 = 100).
    - `ramp`:     `g(t) = 1` for `t <= t0`, `factor` for `t >= t1`, linear in between."""

    base: float = 2.2e-3
    kind: Literal["constant", "jump", "ramp"] = "constant"
    factor: float = 2.5
    t0: int = 100
    t1: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "jump", "ramp"):
            raise ValueError("FrictionProfile.kind must be constant, jump or ramp, "
                             f"got {self.kind!r}")
        if not (self.base >= 0 and self.factor >= 0):
            raise ValueError("FrictionProfile.base and .factor must be >= 0")
        if self.kind == "ramp" and (self.t1 is None or self.t1 <= self.t0):
            raise ValueError("a ramp needs t1 > t0 (the step where the ramp ends)")

    @classmethod
    def constant(cls, base: float = 2.2e-3) -> FrictionProfile:
        return cls(base, "constant")

    @classmethod
    def jump(cls, base: float = 2.2e-3, factor: float = 2.5, t0: int = 100) -> FrictionProfile:
        return cls(base, "jump", factor, t0)

    @classmethod
    def ramp(cls, base: float, factor: float, t0: int, t1: int) -> FrictionProfile:
        return cls(base, "ramp", factor, t0, t1)

    def friction(self, t: int) -> float:
        """`mu_t` [N m s] at optimizer step `t`."""
        if self.kind == "jump" and t >= self.t0:
            return self.base * self.factor
        if self.kind == "ramp" and t > self.t0:
            frac = min(1.0, (t - self.t0) / (self.t1 - self.t0))
            return self.base * (1.0 + frac * (self.factor - 1.0))
        return self.base


@dataclass(frozen=True)
class Evaluation:
    """One closed-loop experiment. `cost`/`regret` are `None` when `failed`.

    `optimal_cost` is `J_t(K*_t)` under the same noise, so `regret = cost - optimal_cost`."""

    cost: float | None
    failed: bool
    regret: float | None
    optimal_cost: float


@dataclass
class CartPolePlant:
    """Params + friction profile + noise seed + failure threshold: `evaluate(K, t)`.

    The profile's `mu_t` replaces `params.friction`. An experiment fails when its cost is above
    `max_cost` or the state leaves the floats (`inf`); the optimizer then gets no cost.

    Regret `r_t = J_t(K) - J_t(K*_t)` uses one noise realisation for both gains. It is reported
    raw, never clipped: it can be slightly negative, because `K*_t` minimizes the *expected*
    (infinite-horizon) cost, not every realisation or the 20-s truncation: the noise adds a term
    linear in `K - K*_t` to `J_t`. Measured with the default noise: at gains 0.01-1 % from `K*_t`
    the smallest regret was about -2e-4 (1e-5 of `J*`), against a median of +2e-3 at 1 %."""

    params: CartPoleParams = field(default_factory=CartPoleParams)
    profile: FrictionProfile = field(default_factory=FrictionProfile)
    seed: int = 0
    max_cost: float = 100.0
    steps: int = STEPS
    x0: tuple[float, ...] = X0
    optima_: dict[float, tuple[np.ndarray, float]] = field(default_factory=dict, repr=False)

    def params_at(self, t: int) -> CartPoleParams:
        return replace(self.params, friction=self.profile.friction(t))

    def optimum(self, t: int) -> tuple[np.ndarray, float]:
        """`(K*_t, J*_t)` (noise-free cost), cached per distinct friction value."""
        mu = self.profile.friction(t)
        if mu not in self.optima_:
            self.optima_[mu] = lqr_gain(self.params_at(t), steps=self.steps, x0=self.x0)
        K, J = self.optima_[mu]
        return K.copy(), J

    def evaluate(self, K: np.ndarray, t: int) -> Evaluation:
        """Cost of gains `K` `(4,)` at step `t`, noise `default_rng([seed, t])`, and its regret."""
        params = self.params_at(t)
        K_opt, _ = self.optimum(t)
        W = process_noise(params, (self.seed, t), self.steps)
        optimal = _cost(K_opt, params, W, self.steps, self.x0)
        cost = _cost(np.asarray(K, dtype=float).reshape(4), params, W, self.steps, self.x0)
        if not cost <= self.max_cost:
            return Evaluation(None, True, None, optimal)
        return Evaluation(cost, False, cost - optimal, optimal)
