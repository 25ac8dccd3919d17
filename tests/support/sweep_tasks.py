"""Real task functions for the sweep executor's tests (importable by spawned workers)."""

from __future__ import annotations

import math


def square_root(x: float) -> dict:
    """`{"x", "root"}`; raises ValueError (math domain error) for a negative `x`."""
    return {"x": x, "root": math.sqrt(x)}


def blas_threads(i: int) -> dict:
    """The worker's BLAS thread setting, as numpy would read it at import."""
    import os

    return {"i": i, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "pid": os.getpid()}
