"""The ET-GP-UCB event trigger (Brunzema et al., arXiv 2208.10790, Lemma 3 and Alg. 1).

After observing `y_t` at `x_t`, the measurement is compared with the posterior of the current
dataset D (before `(x_t, y_t)` is added). Under a static objective, with probability at least
`1 - delta_B` for all t' simultaneously,

    psi_t = |y_t - mu_D(x_t)| <= sqrt(rho_t') sigma_D(x_t) + wbar_t'  =: threshold,

so a violation is evidence that the objective has changed and the dataset is reset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def pi_t(t_prime: int) -> float:
    """`pi_t' = pi^2 t'^2 / 6`: sum over t' of `1/pi_t'` is 1 (union bound over steps)."""
    return math.pi**2 * t_prime**2 / 6.0


def rho(t_prime: int, delta_b: float) -> float:
    """`rho_t' = 2 ln(2 pi_t' / delta_B)`."""
    return 2.0 * math.log(2.0 * pi_t(t_prime) / delta_b)


def wbar(t_prime: int, delta_b: float, noise_variance: float) -> float:
    """`wbar_t' = sqrt(2 sigma_n^2 ln(2 pi_t' / delta_B))`: the bound on the noise sample."""
    return math.sqrt(2.0 * noise_variance * math.log(2.0 * pi_t(t_prime) / delta_b))


@dataclass(frozen=True)
class TriggerDecision:
    """One evaluation of the trigger: `psi`, the threshold, the `t'` used, and whether it fired."""

    psi: float
    threshold: float
    t_prime: int
    fired: bool


@dataclass(frozen=True)
class EventTrigger:
    """`reset iff psi_t > sqrt(rho_t') sigma_D(x_t) + wbar_t'` with confidence parameter `delta_B`."""

    delta_b: float
    noise_variance: float

    def __post_init__(self) -> None:
        if not 0.0 < self.delta_b < 1.0:
            raise ValueError("delta_b must be in (0, 1)")
        if not self.noise_variance > 0.0:
            raise ValueError("noise_variance must be > 0")

    def threshold(self, sigma: float, t_prime: int) -> float:
        """`sqrt(rho_t') sigma + wbar_t'` for posterior std `sigma` of the latent f."""
        if t_prime < 1:
            raise ValueError("t' counts steps from 1")
        return math.sqrt(rho(t_prime, self.delta_b)) * sigma + wbar(
            t_prime, self.delta_b, self.noise_variance
        )

    def evaluate(self, y: float, mu: float, sigma: float, t_prime: int) -> TriggerDecision:
        """Compare the measurement `y` with the prediction `mu +- ...` made before adding it."""
        psi = abs(float(y) - float(mu))
        kappa = self.threshold(float(sigma), int(t_prime))
        return TriggerDecision(psi=psi, threshold=kappa, t_prime=int(t_prime), fired=psi > kappa)
