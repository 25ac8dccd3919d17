"""The ET-GP-UCB event trigger: the paper's single-point test and the robust default.

After observing `y_t` at `x_t`, the measurement is compared with the posterior of the current
dataset D (before `(x_t, y_t)` is added). The one-step-ahead residual `e_t = y_t - mu_D(x_t)` has,
under a static objective drawn from the GP prior (fixed hyperparameters), the predictive law
`N(0, s_t^2)` with `s_t^2 = sigma_D^2(x_t) + sigma_n^2`, and the residuals since the last reset are
independent (the prediction-error decomposition: each is Gaussian given everything before it).

**Point test** (Brunzema et al., arXiv 2208.10790, Lemma 3 and Alg. 1):

    psi_t = |e_t| > sqrt(rho_t') sigma_D(x_t) + wbar_t',
    rho_t' = 2 ln(2 pi_t' / delta_B),  wbar_t' = sqrt(2 sigma_n^2 ln(2 pi_t' / delta_B)) = sqrt(rho_t') sigma_n.

The threshold is `sqrt(rho_t') (sigma + sigma_n) >= sqrt(rho_t') s_t`, so with
`P(|Z| > c) <= exp(-c^2 / 2)` one step fires falsely with probability at most
`delta_B / (2 pi_t')`; summed over t' (`sum 1/pi_t' = 1`) at most **delta_B / 2**.

**Window test** (the robust trigger): for each window `w = 2..W` of the last w residuals,

    |sum e_i| > c_t' sqrt(sum s_i^2),   c_t' = sqrt(2 ln(2 pi_t' W / delta_B)).

The sum is `N(0, sum s_i^2)`, so each (t', w) fires falsely with probability at most
`delta_B / (2 pi_t' W)`; over `w = 2..W` and all t' at most `delta_B (W - 1) / (2 W)` < **delta_B / 2**.
Both tests together keep the paper's guarantee: no false reset with probability >= 1 - delta_B.
Several same-sign residuals, each just under the point threshold (a step change of ~6 sigma_n),
cross the window threshold within two or three steps (docs/benchmarks.md, *False alarms*).

**Refractory period, with backoff**: no reset during the first `h` steps after a reset (tests
still run and their residuals still count). `h = refractory * backoff^(k-1)`, where the level
`k` counts the resets of the current run of resets: each reset raises it by one, and every
`burst_steps` steps between two resets lower it by one first (never below 0). One isolated reset
holds `refractory` steps; a reset loop holds 2x, 4x, 8x ... as long. This caps the number of
resets in T steps whatever the measurements are (a bound that needs no model, the loop's case:
a model the data contradict), while the false-alarm bound above and the detection of a first
change are untouched (holding a reset never adds a false alarm). Reaching level `k` without a
quiet period takes at least `refractory (backoff^(k-1) - 1) / (backoff - 1)` steps; a hold of
`2 burst_steps` or more puts the next reset two quiet periods later, which lowers the level, so
the hold stays below `2 backoff burst_steps`. (`refractory: 0` holds nothing, at any level.)

**Reset burst**: more than `burst_resets` resets within `burst_steps` steps is reported
(`reset_burst`), so an operator sees a loop at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


def pi_t(t_prime: int) -> float:
    """`pi_t' = pi^2 t'^2 / 6`: sum over t' of `1/pi_t'` is 1 (union bound over steps)."""
    return math.pi**2 * t_prime**2 / 6.0


def rho(t_prime: int, delta_b: float) -> float:
    """`rho_t' = 2 ln(2 pi_t' / delta_B)`."""
    return 2.0 * math.log(2.0 * pi_t(t_prime) / delta_b)


def wbar(t_prime: int, delta_b: float, noise_variance: float) -> float:
    """`wbar_t' = sqrt(2 sigma_n^2 ln(2 pi_t' / delta_B))`: the bound on the noise sample."""
    return math.sqrt(2.0 * noise_variance * math.log(2.0 * pi_t(t_prime) / delta_b))


def window_constant(t_prime: int, delta_b: float, window: int) -> float:
    """`c_t' = sqrt(2 ln(2 pi_t' W / delta_B))`, the window test's multiple of `sqrt(sum s_i^2)`."""
    return math.sqrt(2.0 * math.log(2.0 * pi_t(t_prime) * window / delta_b))


@dataclass(frozen=True)
class TriggerDecision:
    """One evaluation of the trigger.

    `psi`/`threshold`: the point test. `window`, `window_psi`, `window_threshold`: the window
    test's most significant window (largest `|sum e| / threshold`; 0, 0, inf when none ran).
    `test`: which test fired (`"point"`, `"window"`) or None. `fired`: reset now (a test fired,
    outside the refractory period, on a non-empty dataset, where D is informed). `held`: a test
    fired but the refractory period, the calibration or an uninformed residual held the reset
    back; `uninformed`: the last (module docstring).
    """

    psi: float
    threshold: float
    t_prime: int
    fired: bool
    window: int = 0
    window_psi: float = 0.0
    window_threshold: float = math.inf
    test: str | None = None
    held: bool = False
    uninformed: bool = False


@dataclass(frozen=True)
class EventTrigger:
    """The paper's test: `reset iff psi_t > sqrt(rho_t') sigma_D(x_t) + wbar_t'` (Lemma 3).

    Keeps no state; `n`, `noise_variance`, `hold`, `on_reset`, `forget_residuals` and the state
    methods are there so that both triggers are used alike. The paper's sigma_n^2 is known: this test
    keeps its configured value even when the strategy learns one."""

    delta_b: float
    noise_variance: float

    def __post_init__(self) -> None:
        if not 0.0 < self.delta_b < 1.0:
            raise ValueError("delta_b must be in (0, 1)")
        if not self.noise_variance > 0.0:
            raise ValueError("noise_variance must be > 0")

    def threshold(self, sigma: float, t_prime: int, noise_variance: float | None = None) -> float:
        """`sqrt(rho_t') sigma + wbar_t'` for posterior std `sigma` of the latent f."""
        if t_prime < 1:
            raise ValueError("t' counts steps from 1")
        nv = self.noise_variance if noise_variance is None else float(noise_variance)
        # Lemma 3 of arXiv 2208.10790: |y_t - mu_D(x_t)| <= sqrt(rho_t') sigma_D(x_t) + wbar_t'
        return math.sqrt(rho(t_prime, self.delta_b)) * sigma + wbar(t_prime, self.delta_b, nv)

    def evaluate(self, y: float, mu: float, sigma: float, t_prime: int, n: int = 1,
                 noise_variance: float | None = None,
                 prior_variance: float | None = None) -> TriggerDecision:
        """Compare the measurement `y` with the prediction `mu +- ...` made before adding it
        (`noise_variance`, `prior_variance`: read by the robust trigger only)."""
        psi = abs(float(y) - float(mu))
        kappa = self.threshold(float(sigma), int(t_prime))
        fired = psi > kappa
        return TriggerDecision(psi=psi, threshold=kappa, t_prime=int(t_prime), fired=fired,
                               test="point" if fired else None)

    @property
    def hold(self) -> int:
        """Steps after a reset without another one: none in the paper's Algorithm 1."""
        return 0

    def on_reset(self, t: int) -> bool:
        return False

    def forget_residuals(self) -> None:
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


def decide(trigger, y: float, mu: float, sigma: float, t_prime: int, n: int,
           noise_variance: float, calibrating: bool,
           prior_variance: float | None = None) -> TriggerDecision:
    """The reset decision of one tell (Alg. 1 of arXiv 2208.10790): reset D iff the measurement
    leaves the band of Lemma 3 (`trigger.threshold`), or the robust window test fires, outside the
    refractory period, on a non-empty D that is informed at `x_t` (`prior_variance`: the prior's
    `k(x_t, x_t)`). While the measurement map is still calibrating, a test that fires is held:
    residuals are judged on the GP's scale, which is not known yet."""
    decision = trigger.evaluate(y, mu, sigma, t_prime, n, noise_variance, prior_variance)
    if decision.fired and (calibrating or n == 0):  # a reset of an empty D is moot
        decision = replace(decision, fired=False, held=calibrating)
    return decision


class RobustTrigger:
    """Point test + window test + refractory period + uninformed residuals + reset-burst report
    (module docstring); `uninformed=None` never holds a reset for an uninformed residual.

    State (`state_dict`): the residuals `e_i` and predictive variances `s_i^2` since the last
    reset (the last `W - 1`; the current one completes a window), and recent reset steps.
    `noise_variance` in `evaluate` overrides the construction value when it is learned.
    """

    def __init__(self, delta_b: float, noise_variance: float, window: int = 3,
                 refractory: int = 3, burst_resets: int = 5, burst_steps: int = 50,
                 uninformed: float | None = None, uninformed_from: int = 1,
                 backoff: float = 1.0) -> None:
        self.point = EventTrigger(delta_b, noise_variance)
        self.window, self.refractory = int(window), int(refractory)
        self.uninformed, self.uninformed_from = uninformed, int(uninformed_from)
        self.burst_resets, self.burst_steps = int(burst_resets), int(burst_steps)
        self.backoff = float(backoff)
        self.residuals_: list[tuple[float, float]] = []
        self.reset_steps_: list[int] = []
        self.level_, self.last_reset_ = 0, None  # the backoff's level k and the last reset's step

    @property
    def hold(self) -> int:
        """`h = refractory * backoff^(k-1)`: steps after the last reset without another one."""
        return hold_steps(self.refractory, self.backoff, self.level_)

    def evaluate(self, y: float, mu: float, sigma: float, t_prime: int, n: int = 1,
                 noise_variance: float | None = None,
                 prior_variance: float | None = None) -> TriggerDecision:
        """Both tests on the residual of `y`; `n` is |D| (a reset of an empty D is moot);
        `prior_variance` is `k(x_t, x_t)` (None: the uninformed rule does not apply)."""
        delta_b = self.point.delta_b
        nv = self.point.noise_variance if noise_variance is None else float(noise_variance)
        e = float(y) - float(mu)
        psi = abs(e)
        threshold = self.point.threshold(float(sigma), int(t_prime), nv)
        s2 = float(sigma) ** 2 + nv
        best = (0.0, 0, 0.0, math.inf)  # (ratio, w, |sum e|, threshold)
        if self.window >= 2:
            c = window_constant(int(t_prime), delta_b, self.window)
            past = self.residuals_[-(self.window - 1):]
            total_e, total_v = e, s2
            for w, (ei, vi) in enumerate(reversed(past), start=2):
                total_e += ei
                total_v += vi
                thr = c * math.sqrt(total_v)
                if abs(total_e) / thr > best[0]:
                    best = (abs(total_e) / thr, w, abs(total_e), thr)
        test = "point" if psi > threshold else ("window" if best[0] > 1.0 else None)
        uninformed = test is not None and self._uninformed(float(sigma), n, prior_variance)
        held = test is not None and (int(t_prime) <= self.hold or uninformed)
        fired = test is not None and not held and n > 0
        forget = fired or uninformed  # the window restarts after a reset or an uninformed residual
        self.residuals_ = [] if forget else (self.residuals_ + [(e, s2)])[-max(self.window - 1, 0):]
        return TriggerDecision(psi=psi, threshold=threshold, t_prime=int(t_prime), fired=fired,
                               window=best[1], window_psi=best[2], window_threshold=best[3],
                               test=test, held=held, uninformed=uninformed)

    def _uninformed(self, sigma: float, n: int, prior_variance: float | None) -> bool:
        """`sigma_D^2(x_t) >= uninformed * k(x_t, x_t)` on `|D| >= uninformed_from` (module
        docstring)."""
        return (self.uninformed is not None and prior_variance is not None
                and n >= self.uninformed_from and sigma**2 >= self.uninformed * prior_variance)

    def on_reset(self, t: int) -> bool:
        """Record a reset at step `t` (the backoff's level: module docstring); True if it makes a
        burst (> `burst_resets` within `burst_steps` steps, counting this one)."""
        self.level_ = next_level(self.level_, self.last_reset_, int(t), self.burst_steps)
        self.last_reset_ = int(t)
        self.residuals_ = []
        self.reset_steps_ = [s for s in self.reset_steps_ if s > t - self.burst_steps] + [int(t)]
        return len(self.reset_steps_) > self.burst_resets

    def forget_residuals(self) -> None:
        """Drop the window's residuals (after the measurement map changed their units)."""
        self.residuals_ = []

    def state_dict(self) -> dict:
        return {"residuals": [list(r) for r in self.residuals_], "reset_steps": list(self.reset_steps_),
                "level": self.level_, "last_reset": self.last_reset_}

    def load_state_dict(self, state: dict) -> None:
        """`level` / `last_reset` are absent from a state written before the backoff existed;
        that state's trigger has `backoff: 1`, on which they have no effect."""
        self.residuals_ = [(float(e), float(v)) for e, v in state["residuals"]]
        self.reset_steps_ = [int(s) for s in state["reset_steps"]]
        self.level_ = int(state.get("level", 0))
        last = state.get("last_reset")
        self.last_reset_ = None if last is None else int(last)


def next_level(level: int, last_reset: int | None, t: int, burst_steps: int) -> int:
    """The backoff's level after a reset at step `t`: lowered by one per `burst_steps` steps since
    the `last_reset` (to 0 when there was none), then raised by one."""
    quiet = level if last_reset is None else (t - last_reset) // burst_steps
    return max(0, level - quiet) + 1


def hold_steps(refractory: int, backoff: float, level: int) -> int:
    """`refractory * backoff^(level-1)` steps (`refractory` before the first reset)."""
    return int(round(refractory * backoff ** max(level - 1, 0)))
