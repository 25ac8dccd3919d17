"""Sobol random search: the `random-search` baseline, the `Strategy` interface without a model.

Step `t` proposes the `t`-th point of one scrambled Sobol sequence seeded by `seed` (box: mapped onto
the box; points/arms: `floor(u m)`), so the state is only the step and the pending proposal.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DomainError, StateError
from ..spec import OptimizerSpec
from .base import Strategy, TellResult

_STATE_FORMAT = 1


class RandomSearchStrategy(Strategy):
    """`x_t` = the t-th scrambled Sobol point; `tell` only records the best measurement."""

    def __init__(self, spec: OptimizerSpec) -> None:
        from .build import build_domain

        self.spec = spec
        self.name = spec.strategy
        self.domain = build_domain(spec)
        self._sign = 1.0 if spec.sense == "maximize" else -1.0
        self._t = 1
        self._pending: np.ndarray | None = None
        self._best: float | None = None  # best measurement so far (measurement units)

    @property
    def best(self) -> float | None:
        return self._best

    def _sobol(self, t: int) -> np.ndarray:
        from scipy.stats import qmc

        dim = self.domain.dim
        eng = qmc.Sobol(dim, scramble=True, seed=self.spec.seed)
        if t > 1:
            eng.fast_forward(t - 1)
        return eng.random(1)[0]

    def ask(self) -> np.ndarray:
        if self._pending is None:
            u = self._sobol(self._t)
            if self.domain.finite:
                self._pending = np.array([float(min(int(u[0] * self.domain.size), self.domain.size - 1))])
            else:
                d = self.domain
                self._pending = d.z_lower + u * (d.z_upper - d.z_lower)
        return self.domain.to_physical(self._pending)

    def tell(self, x, y: float, failed: bool = False) -> TellResult:
        self.domain.to_internal(x)  # validates
        if not np.isfinite(y):
            raise DomainError(f"measurement must be finite, got {y!r}")
        t = self._t
        y = float(y)
        if self._best is None or self._sign * y > self._sign * self._best:
            self._best = y
        self._t += 1
        self._pending = None
        return TellResult(t=t, t_prime=t, reset=False, reset_reason=None, psi=math.nan,
                          threshold=math.nan, mu=math.nan, sigma=math.nan, dataset_size=0)

    def state_dict(self) -> dict:
        return {"format": _STATE_FORMAT, "strategy": self.name, "dim": int(self.domain.dim),
                "t": self._t, "best": self._best,
                "pending": None if self._pending is None else self._pending.tolist()}

    def load_state_dict(self, state: dict) -> None:
        try:
            if state["format"] != _STATE_FORMAT or state["strategy"] != self.name:
                raise StateError(f"state is not a {self.name!r} state of format {_STATE_FORMAT}")
            if int(state["dim"]) != self.domain.dim:
                raise StateError(f"state has dimension {state['dim']}, domain has {self.domain.dim}")
            t = int(state["t"])
            if t < 1:
                raise StateError(f"inconsistent step t={t}")
            pending = state["pending"]
            best = state["best"]
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, StateError):
                raise
            raise StateError(f"malformed state: {exc!r}") from None
        self._t = t
        self._best = None if best is None else float(best)
        self._pending = None if pending is None else np.asarray(pending, dtype=float).reshape(-1)
