"""The one validator kit: small checks of YAML-shaped values at a dotted key (pure, no I/O).

`tvbod.core.spec` (the `optimizer:` mapping) and `tvbod.service.config` (daemon and plant files)
both use these, so a number, an integer, a choice or an unknown key is judged and reported the
same way everywhere. Each raises `InvalidValue(key, problem, allowed)`; spec turns it into a
`SpecError`, config into a `ConfigError` that also names the file. `defaults(cls)` reads a frozen
dataclass's defaults, so each default is written once, in the dataclass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from tvbod.core.errors import InvalidValue

__all__ = ["InvalidValue", "check_keys", "choice", "defaults", "integer", "mapping", "matrix",
           "number", "string", "vector"]


def defaults(cls) -> SimpleNamespace:
    """The default of every field of dataclass `cls` that has one, by name."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return SimpleNamespace(**out)


def mapping(value, key: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise InvalidValue(key, f"must be a mapping, got {type(value).__name__}")
    return value


def check_keys(m: Mapping, allowed, prefix: str = "") -> None:
    """Every key of `m` is one of `allowed` (reported as `prefix` + key)."""
    for k in m:
        if k not in allowed:
            raise InvalidValue(f"{prefix}{k}", "unknown key", ", ".join(sorted(allowed)))


def number(value, key: str, lo: float = -math.inf, hi: float = math.inf, *, lo_open: bool = False,
           hi_open: bool = False) -> float:
    """A finite int or float (not a bool) within `[lo, hi]` (`(` / `)` when open), as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidValue(key, f"must be a number, got {value!r}")
    v = float(value)
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok:
        lb = "(" if lo_open else "["
        ub = ")" if hi_open else "]"
        raise InvalidValue(key, f"{v!r} is out of range", f"{lb}{lo}, {hi}{ub}")
    return v


def integer(value, key: str, lo: int, hi: int = 2**62) -> int:
    """An int (not a bool) within `[lo, hi]`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidValue(key, f"must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise InvalidValue(key, f"{value} is out of range", f"[{lo}, {hi}]")
    return int(value)


def string(value, key: str) -> str:
    """A non-empty str."""
    if not isinstance(value, str) or not value:
        raise InvalidValue(key, f"must be a non-empty string, got {value!r}")
    return value


def choice(value, key: str, allowed: Sequence[str]) -> Any:
    """One of `allowed`."""
    if value not in allowed:
        raise InvalidValue(key, f"{value!r} is not supported", ", ".join(allowed))
    return value


def vector(value, key: str, n: int | None = None) -> tuple[float, ...]:
    """A list of numbers (a single number stands for `n` copies), of length `n` if given."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * (n or 1)
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise InvalidValue(key, "must be a list of numbers")
    out = tuple(number(v, f"{key}[{i}]") for i, v in enumerate(value))
    if not out or (n is not None and len(out) != n):
        raise InvalidValue(key, f"needs {n if n is not None else 'at least one'} numbers, "
                           f"got {len(out)}")
    return out


def matrix(value, key: str) -> np.ndarray:
    """A non-empty rectangular 2-D array of finite numbers."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidValue(key, "must be a rectangular list of lists of numbers") from None
    if a.ndim != 2 or a.size == 0 or not np.all(np.isfinite(a)):
        raise InvalidValue(key, "must be a non-empty 2-D array of finite numbers")
    return a
