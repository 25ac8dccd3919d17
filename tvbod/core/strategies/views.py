"""Read-only views of a GP-UCB strategy: its counters, predictions and dataset, and what its
exploration (`exploration.Model`) and acquisitions read of the posterior.

`GPViews` is a mixin of `GPUCBStrategy` (it reads `gp`, `domain`, `output`, `spec`,
`base_kernel`, `exploration` and the step counters, and calls `settle` before a posterior read;
the step `t` itself is `Strategy.t`).
"""

from __future__ import annotations

import numpy as np

from ..agpucb import EstimatorData, regret_estimate
from ..domains import PointsDomain
from ..kernels import ForgettingFactor

_RNG_MC = 3  # the Monte Carlo points of the integrated variance (adaptive kappa/lambda)
#: Candidates of the A-GP-UCB sigma-floor check on a box (the first rows of the Sobol set).
_FLOOR_CANDIDATES = 256


class GPViews:
    """Counters, predictions, the dataset, and the exploration's view of the posterior."""

    # ------------------------------------------------------------------ read-only views
    @property
    def lengthscales(self) -> np.ndarray | None:
        self.settle()
        return None if self.base_kernel is None else self.base_kernel.lengthscales.copy()

    @property
    def variances(self) -> tuple[float, float]:
        """`(sigma_f^2, sigma_n^2)` in force (fitted with `hyperparameters.variance` /
        `noise_variance: map`, else the configured values)."""
        self.settle()
        return (self.spec.kernel.variance if self.base_kernel is None else self.base_kernel.variance,
                self.gp.noise_variance)

    @property
    def forgetting(self) -> float | None:
        """The forgetting factor's `eps` in force (learned with `forgetting_floor: auto`), or None
        without a forgetting factor."""
        self.settle()
        return self.gp.temporal.eps if isinstance(self.gp.temporal, ForgettingFactor) else None

    @property
    def t_prime(self) -> int:
        """`t'` for the next tell: steps since the last reset (`t` before the first one)."""
        return self._t - self._t_reset

    @property
    def dataset_size(self) -> int:
        return self.gp.n

    @property
    def resets(self) -> int:
        return self._resets

    @property
    def last_reset_t(self) -> int | None:
        return self._last_reset_t

    @property
    def pending(self) -> np.ndarray | None:
        """The proposal waiting for its `tell`, in physical units, or None."""
        return None if self._pending is None else self.domain.to_physical(self._pending)

    def to_internal_y(self, y: float) -> float:
        """Measurement -> the GP's scale: `sign * (y - offset) / scale` (sign -1 when minimizing;
        offset/scale calibrated with `measurement: auto`, `calibration.py`)."""
        return self.output.to_internal(y)

    def predict(self, x) -> tuple[float, float]:
        """Posterior mean and std of the objective at `x` for the next step, in measurement units."""
        self.settle()
        z = self.domain.to_internal(x)
        mean, var = self.gp.predict(z[None, :], float(self._t))
        return (float(self.output.to_measurement(float(mean[0]))),
                float(np.sqrt(var[0])) * self.output.scale_)

    def dataset(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The current dataset D as `(X physical (n, d), y in measurement units (n,), steps (n,))`."""
        if self.gp.n == 0:
            return np.empty((0, self.domain.dim)), np.empty(0), np.empty(0, dtype=int)
        X = np.array([self.domain.to_physical(z) for z in self.gp.X_])
        y = self.output.to_measurement(self.gp.y_)
        return X, y, self.gp.times_.astype(int)

    def _posterior_at(self, z: np.ndarray, t: int) -> tuple[float, float]:
        if self.domain.finite and self.gp.n:
            mean, var = self.gp.predict_query_set(float(t))
            i = int(z[0])
            return float(mean[i]), float(np.sqrt(var[i]))
        mean, var = self.gp.predict(z[None, :], float(t))
        return float(mean[0]), float(np.sqrt(var[0]))

    # ------------------------------------------------------------------ exploration's view
    @property
    def kappa(self) -> float | None:
        """The UCB weight of the next ask (`kappa_t`, or `sqrt(beta_t)`); None for EI."""
        if self.spec.acquisition == "ei":
            return None
        self.settle()
        return self.exploration.kappa(self._t)

    def _data_mean(self, t: int) -> np.ndarray:
        if self.domain.finite:
            return self.gp.predict_query_set(float(t))[0][self.gp.X_[:, 0].astype(int)]
        return self.gp.predict(self.gp.X_, float(t))[0]

    # -- the GP in kernel coordinates (a box's internal z; a points domain's scaled coordinates)
    def _kernel_coords(self, Z: np.ndarray) -> np.ndarray:
        if isinstance(self.domain, PointsDomain):
            return self.domain.kernel_inputs[np.asarray(Z)[:, 0].astype(int)]
        return np.asarray(Z, dtype=float)

    def _kernel_mean(self, P: np.ndarray, t: int) -> np.ndarray:
        """Posterior mean at kernel coordinates `P` `(m, d)` (continuous also on a points domain)."""
        if not isinstance(self.domain, PointsDomain):
            return self.gp.predict(P, float(t))[0]
        k = self.base_kernel(P, self._kernel_coords(self.gp.X_))
        if self.gp.temporal is not None:
            k = k * self.gp.temporal(np.array([float(t)]), self.gp.times_)
        return k @ self.gp.alpha_

    def integrated_variance(self, t: int) -> float:
        """`I_t`: mean posterior variance over the domain at step `t` (Monte Carlo: `mc_points`
        uniform points from `default_rng([seed, t, 3])` on a box; the exact mean on a points set)."""
        if self.domain.finite:
            return float(np.mean(self.gp.predict_query_set(float(t))[1]))
        rng = np.random.default_rng([self.spec.seed, t, _RNG_MC])
        return float(np.mean(self.gp.predict(self.domain.sample(rng, self.spec.exploration.mc_points),
                                             float(t))[1]))

    def regret_estimate(self, t: int):
        """A-GP-UCB's `h -> estimate` on the current dataset (`tvbod.core.agpucb`)."""
        d = self.domain
        candidates = (d.kernel_inputs if isinstance(d, PointsDomain) else
                      d.z_lower + self._unit[:_FLOOR_CANDIDATES] * (d.z_upper - d.z_lower))
        data = EstimatorData(self._kernel_coords(self.gp.X_), self.gp.y_, self.gp.times_,
                             self.base_kernel, self.gp.temporal, self.spec.noise_variance,
                             candidates)
        return regret_estimate(self.exploration, data, t)
