"""The pure optimizer core: kernels, GP posterior, event trigger, acquisition, strategies.

Imports numpy and scipy only (no sockets, files, clocks or logging), so it runs in a notebook:

>>> from tvbod.core import make_strategy
>>> s = make_strategy({"domain": {"lower": [0.0], "upper": [1.0]}, "seed": 1})
>>> x = s.ask(); r = s.tell(x, 0.5)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .errors import DomainError, NumericalError, SpecError, StateError, TvbodError
from .spec import OptimizerSpec, parse_spec

if TYPE_CHECKING:
    from .strategies import GPUCBStrategy, RandomSearchStrategy, Strategy, TellResult
    from .trigger import EventTrigger, TriggerDecision

#: Names loaded on first use (PEP 562), so `tvbod.core.spec` and the validators (the config
#: loader, `tvbod status`) do not pay for scipy and the strategies.
_LAZY = {"GPUCBStrategy": ".strategies", "RandomSearchStrategy": ".strategies",
         "Strategy": ".strategies", "TellResult": ".strategies", "EventTrigger": ".trigger",
         "TriggerDecision": ".trigger"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_strategy(spec: Mapping | OptimizerSpec) -> Strategy:
    """Build the strategy an `optimizer:` mapping describes (validated by `parse_spec`)."""
    from .strategies import GPUCBStrategy, RandomSearchStrategy

    spec = parse_spec(spec)
    if spec.strategy == "random-search":
        return RandomSearchStrategy(spec)
    return GPUCBStrategy(spec)


__all__ = [
    "DomainError", "EventTrigger", "NumericalError", "OptimizerSpec", "SpecError", "StateError",
    "Strategy", "TellResult", "TriggerDecision", "TvbodError", "make_strategy", "parse_spec",
]
