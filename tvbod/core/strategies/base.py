"""The strategy interface every optimizer in tvbod implements: `ask`, `tell`, and exact state."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TellResult:
    """What one `tell` did.

    `t` is the step that was told, `t_prime` the steps since the last reset used by the trigger,
    `psi`/`threshold`/`mu`/`sigma` the trigger's quantities in the GP's internal (scaled) units,
    `reset` whether the dataset was reset and `reset_reason` why ("event" or "periodic"),
    `dataset_size` the size of D after the tell. The robust trigger (`tvbod.core.trigger`) adds
    `test` (which test fired: "point", "window" or None), the window test's most significant
    window `window` with `window_psi` against `window_threshold`, `held` (a test fired but did
    not reset: inside the refractory period, while calibrating, or `uninformed`: where D knew
    nothing of the point) and `reset_burst` (this reset makes a burst).
    """

    t: int
    t_prime: int
    reset: bool
    reset_reason: str | None
    psi: float
    threshold: float
    mu: float
    sigma: float
    dataset_size: int
    test: str | None = None
    window: int = 0
    window_psi: float = 0.0
    window_threshold: float = float("inf")
    held: bool = False
    uninformed: bool = False
    reset_burst: bool = False
    #: `safety:` (`tvbod.core.safety`): the measurement crossed the threshold (or the experiment
    #: failed), and the backup controller (physical units) a reset fell back to
    safety_violation: bool = False
    failed: bool = False
    backup: list | None = None
    #: the share of the domain the safe set certifies once this point is in D (before the
    #: deferred refit, `settle`)
    safe_fraction: float | None = None
    #: the told measurement on the GP's scale, in the measurement map this tell left (None: no GP)
    scaled: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
    """A measurement as the model takes it (`Strategy.measured`): `told`, the value recorded in
    measurement units (under `safety:` capped one safety-prior sd past the threshold, a failure
    at the cap); `internal`, it on the GP's scale in the measurement map now (None: no GP);
    `violation`, it crossed the safety threshold or the experiment failed; `capped`, the cap set
    `told` (a capped value does not calibrate the measurement map)."""

    told: float
    internal: float | None
    violation: bool
    capped: bool


class Strategy(ABC):
    """A seeded, deterministic sequential optimizer over a domain (maximizes internally)."""

    name: str
    _pending: np.ndarray | None = None  # the computed next proposal (internal coordinates)
    _t: int  # the step of the next ask/tell (`t`)

    @property
    def proposal_ready(self) -> bool:
        """True when the next proposal is computed: `ask` only returns it."""
        return self._pending is not None

    @property
    def settled(self) -> bool:
        """True when no work a `tell` deferred is left (`settle` would do nothing)."""
        return True

    @property
    def t(self) -> int:
        """The global step of the next `ask`/`tell` (from 1)."""
        return self._t

    @abstractmethod
    def ask(self) -> np.ndarray:
        """The next point to evaluate, in physical units; repeated calls before a `tell` agree."""

    @abstractmethod
    def tell(self, x, y: float, failed: bool = False) -> TellResult:
        """Report measurement `y` at `x` (any point of the domain, not only the last proposal);
        `failed`: the experiment failed and `y` is the value recorded for it."""

    def measured(self, y: float, failed: bool = False) -> Measured:
        """What a `tell(x, y, failed)` would record, without changing anything: `y` as is (no
        model, no scale) unless a strategy with a GP says otherwise (`GPUCBStrategy`)."""
        return Measured(float(y), None, False, False)

    def settle(self) -> bool:
        """Finish the work a `tell` deferred (model refits); True if there was any.

        `tell` returns as soon as its decision is made; what only shapes the next proposal may run
        later. Every read of the model settles first, so calling this early changes no result: the
        daemon calls it off the reply path."""
        return False

    def compact(self) -> None:
        """Hold the model in less memory until it is next used (a daemon calls it between a
        plant's steps); changes no result. Nothing to do by default."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Plain data (numbers, strings, lists) from which `load_state_dict` restores exactly."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict`; the next proposal is bit-identical to the saved strategy's."""
