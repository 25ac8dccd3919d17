"""The plain-data state of a `GPUCBStrategy`: written by `write_state`, checked by `read_state`.

Reading builds every restored part first and only then hands them over (`Restored`), so a state
that does not fit the spec raises `StateError` and leaves the strategy as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..calibration import OutputMap
from ..errors import StateError
from .build import build_exploration, build_trigger

STATE_FORMAT = 1


def write_state(s) -> dict:
    """`s`'s state; the exploration, trigger, fitted variances and measurement map only where
    they hold something (a FixedBeta strategy's state has no `exploration` entry)."""
    explo, trig = s.exploration.state_dict(), s.trigger.state_dict()
    return {
        "format": STATE_FORMAT,
        "strategy": s.name,
        "dim": int(s.domain.dim),
        "t": s._t,
        "t_reset": s._t_reset,
        "resets": s._resets,
        "last_reset_t": s._last_reset_t,
        "pending": None if s._pending is None else s._pending.tolist(),
        "lengthscales": None if s.base_kernel is None else s.base_kernel.lengthscales.tolist(),
        "gp": s.gp.state_dict(),
        **({"exploration": explo} if explo else {}),
        **({"trigger": trig} if trig else {}),
        **({"variances": list(s.variances)} if s._learns_variances else {}),
        **({"output": s.output.state_dict()} if s.spec.calibrates else {}),
        **({"forgetting": s.gp.temporal.eps} if s.spec.learns_forgetting else {}),
        **({"noise_variance": s.gp.noise_variance} if s.spec.learns_noise else {}),
        **({"safety": s.safety.state_dict()} if s.safety is not None else {}),
    }


@dataclass(frozen=True)
class Restored:
    """The parts of a checked state, ready to replace the strategy's."""

    t: int
    t_reset: int
    resets: int
    last_reset_t: int | None
    pending: np.ndarray | None
    lengthscales: list | None
    variances: tuple[float, float]
    gp: dict
    exploration: object
    trigger: object
    output: OutputMap
    #: the learned forgetting rate (`forgetting_floor: auto`); None: not in the state
    forgetting: float | None = None
    #: the estimated noise variance (`noise_variance: auto`); None: not in the state
    noise_variance: float | None = None
    #: the safe set's memory (`safety:`); None without safety
    safety: object = None


def read_state(s, state: dict) -> Restored:
    """Check `state` against strategy `s` (its spec and domain); `StateError` if it does not fit."""
    try:
        return _read(s, state)
    except StateError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"malformed state: {exc!r}") from None


def _read(s, state: dict) -> Restored:
    if state["format"] != STATE_FORMAT:
        raise StateError(f"state format {state['format']!r}, expected {STATE_FORMAT}")
    if state["strategy"] != s.name:
        raise StateError(f"state is for strategy {state['strategy']!r}, not {s.name!r}")
    if int(state["dim"]) != s.domain.dim:
        raise StateError(f"state has dimension {state['dim']}, domain has {s.domain.dim}")
    t, t_reset = int(state["t"]), int(state["t_reset"])
    if not 0 <= t_reset < t:
        raise StateError(f"inconsistent steps t={t}, t_reset={t_reset}")
    pending = state["pending"]
    pending = None if pending is None else np.asarray(pending, dtype=float).reshape(-1)
    gp_state = state["gp"]
    gp_state_n = len(gp_state["y"])
    if len(gp_state["X"]) != gp_state_n or len(gp_state["times"]) != gp_state_n:
        raise StateError("gp state has inconsistent lengths")
    resets = int(state["resets"])
    last = state["last_reset_t"]
    ls = state.get("lengthscales")
    if (ls is None) != (s.base_kernel is None) or (
            ls is not None and len(ls) != len(s.base_kernel.lengthscales)):
        raise StateError("state's lengthscales do not fit the kernel")
    exploration = _exploration(s, state)
    trigger = _trigger(s, state)
    variances = _variances(s, state)
    return Restored(t, t_reset, resets, None if last is None else int(last), pending, ls,
                    variances, gp_state, exploration, trigger, _output(s, state),
                    _forgetting(s, state), _noise(s, state), _safety(s, state))


def _noise(s, state: dict) -> float | None:
    """The estimated noise variance of `noise_variance: auto` (None where the state has none: it
    was written under a fixed value)."""
    value = state.get("noise_variance") if s.spec.learns_noise else None
    if value is not None and not (np.isfinite(float(value)) and float(value) > 0):
        raise StateError(f"noise_variance {value!r} is not a positive number")
    return None if value is None else float(value)


def _safety(s, state: dict):
    """The safe set's memory; a state written without `safety:` starts it afresh (safety
    switched on for a plant with a history: no reference point, no backup, no counts)."""
    if s.safety is None:
        return None
    from ..safety import SafeSet

    safe = SafeSet(s.spec.safety, s.domain)
    if state.get("safety") is not None:
        safe.load_state_dict(state["safety"])
    return safe


def _exploration(s, state: dict):
    explo, fresh = state.get("exploration"), build_exploration(s.spec)
    if (explo is None) != (not fresh.state_dict()):
        raise StateError("state's exploration does not match the spec")
    if explo is not None:
        fresh.load_state_dict(explo)
    return fresh


def _trigger(s, state: dict):
    """A state without trigger state (written under the paper trigger, or by tvbod 0.1.0) starts
    the robust trigger afresh (an empty residual window)."""
    trigger = build_trigger(s.spec)
    if state.get("trigger") is not None:
        trigger.load_state_dict(state["trigger"])
    return trigger


def _variances(s, state: dict) -> tuple[float, float]:
    """The fitted `(sigma_f^2, sigma_n^2)`; a state without them starts from the configured ones."""
    variances = (s.spec.kernel.variance, s.spec.noise_variance)
    if s._learns_variances and state.get("variances") is not None:
        variances = tuple(float(v) for v in state["variances"])
        if len(variances) != 2 or not all(np.isfinite(v) and v > 0 for v in variances):
            raise StateError(f"variances {variances!r} are not two positive numbers")
    return variances


def _forgetting(s, state: dict) -> float | None:
    """The learned `eps` of `forgetting_floor: auto` (ignored when the spec does not learn it)."""
    eps = state.get("forgetting") if s.spec.learns_forgetting else None
    if eps is not None and not (isinstance(eps, (int, float)) and 0.0 <= eps < 1.0):
        raise StateError(f"forgetting {eps!r} is not a rate in [0, 1)")
    return None if eps is None else float(eps)


def _output(s, state: dict) -> OutputMap:
    output = OutputMap(s.spec.measurement_offset, s.spec.measurement_scale, s._sign,
                       s.spec.n_calibration, s.spec.pessimism)
    if ("output" in state) != s.spec.calibrates:
        raise StateError("the state's measurement map (fixed or auto) differs from the "
                         "spec's; the GP's targets cannot be re-expressed")
    if s.spec.calibrates:
        output.load_state_dict(state["output"])
    return output
