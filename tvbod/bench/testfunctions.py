"""Standard test functions for `tvbod bench adaptive` (all minimized, vectorized over rows).

`PROBLEMS[name] -> Problem(f, lower, upper, f_min)`; `f_min` is the known global minimum (for the
Gaussian mixture: the best of a multi-start local search, computed once per problem).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Problem:
    name: str
    dim: int
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    f_min: float

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return FUNCTIONS[self.name.split("-")[0]](np.atleast_2d(np.asarray(X, dtype=float)))


def branin(X):
    x, y = X[:, 0], X[:, 1]
    b, c, r, s, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - r) ** 2 + s * (1 - t) * np.cos(x) + s


def rosenbrock(X):
    return np.sum(100.0 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (1 - X[:, :-1]) ** 2, axis=1)


def ackley(X):
    d = X.shape[1]
    return (-20.0 * np.exp(-0.2 * np.sqrt(np.sum(X**2, axis=1) / d))
            - np.exp(np.sum(np.cos(2 * math.pi * X), axis=1) / d) + 20.0 + math.e)


def levy(X):
    w = 1 + (X - 1) / 4
    head = np.sin(math.pi * w[:, 0]) ** 2
    mid = np.sum((w[:, :-1] - 1) ** 2 * (1 + 10 * np.sin(math.pi * w[:, :-1] + 1) ** 2), axis=1)
    tail = (w[:, -1] - 1) ** 2 * (1 + np.sin(2 * math.pi * w[:, -1]) ** 2)
    return head + mid + tail


_H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(X):
    inner = np.sum(_H6_A[None] * (X[:, None, :] - _H6_P[None]) ** 2, axis=2)
    return -np.exp(-inner) @ _H6_ALPHA


@lru_cache(maxsize=8)
def _mixture(dim: int):
    """5 Gaussian bumps on [-5, 5]^d (fixed seed 6): centers, widths, weights."""
    rng = np.random.default_rng([6, dim])
    return (rng.uniform(-4, 4, (5, dim)), rng.uniform(0.8, 2.0, 5) * math.sqrt(dim),
            rng.uniform(0.5, 1.0, 5))


def gmix(X):
    c, w, a = _mixture(X.shape[1])
    d2 = np.sum((X[:, None, :] - c[None]) ** 2, axis=2)
    return -(np.exp(-0.5 * d2 / w[None] ** 2) @ a)


FUNCTIONS = {"branin": branin, "rosenbrock": rosenbrock, "ackley": ackley, "levy": levy,
             "hartmann6": hartmann6, "gmix": gmix}
_BOXES = {"rosenbrock": (-2.048, 2.048), "ackley": (-32.768, 32.768), "levy": (-10.0, 10.0),
          "gmix": (-5.0, 5.0)}


def _gmix_min(dim: int) -> float:
    from scipy.optimize import minimize

    c, _, _ = _mixture(dim)
    best = min(float(gmix(ci[None])[0]) for ci in c)
    for ci in c:
        r = minimize(lambda x: float(gmix(x[None])[0]), ci, method="L-BFGS-B",
                     bounds=[(-5, 5)] * dim)
        best = min(best, float(r.fun))
    return best


@lru_cache(maxsize=32)
def problem(name: str) -> Problem:
    """`branin`, `hartmann6`, or `<rosenbrock|ackley|levy|gmix>-<d>`."""
    if name == "branin":
        return Problem(name, 2, (-5.0, 0.0), (10.0, 15.0), 0.397887357729738)
    if name == "hartmann6":
        return Problem(name, 6, (0.0,) * 6, (1.0,) * 6, -3.32236801141551)
    base, _, d = name.partition("-")
    if base not in _BOXES or not d.isdigit():
        raise KeyError(f"unknown problem {name!r}")
    d = int(d)
    lo, hi = _BOXES[base]
    f_min = _gmix_min(d) if base == "gmix" else 0.0
    return Problem(name, d, (lo,) * d, (hi,) * d, f_min)


ALL_PROBLEMS = ("branin", *(f"{b}-{d}" for b in ("rosenbrock", "ackley", "levy") for d in (2, 5, 10)),
                "hartmann6", *(f"gmix-{d}" for d in (2, 5, 10)))
