"""Real task functions for the sweep executor's tests (importable by spawned workers)."""

from __future__ import annotations

import math


def square_root(x: float) -> dict:
    """`{"x", "root"}`; raises ValueError (math domain error) for a negative `x`."""
    return {"x": x, "root": math.sqrt(x)}
