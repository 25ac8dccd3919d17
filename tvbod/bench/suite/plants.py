"""The registry of the suite's plants and their split.

`plant(name)` builds a plant once per process, its `split` set from the split table
(`split.SPLIT`). A plant may have a `for_run(seed)` method that returns the run's own realisation
of it (the temperature plant: a start offset into the data); the runner calls it with the run's
seed. The TuneControl family lives in `tunecontrol*.py` of this package; it is imported lazily
and left out while that module is not there.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

from . import motor, project, synthetic
from .search import search_best
from .split import SPLIT

__all__ = ["SPLIT", "names", "plant", "search_best", "split_of", "split_table"]

#: Modules of this package that may define more plants (`PLANTS` mapping or `plants()`).
EXTRA_MODULES = ("tunecontrol",)


def split_of(name: str) -> str:
    if name in SPLIT:
        return SPLIT[name]
    if name in _extra() or name.startswith(("tc-", "tunecontrol")):
        return SPLIT["TuneControl family (tunecontrol.py)"]
    raise KeyError(f"plant {name!r} has no entry in the split table")


def _own() -> dict:
    return {"cartpole": project.CartPole, "temperature": project.Temperature,
            "dc-motor": motor.DCMotor,
            "hartmann3": synthetic.hartmann3, "ackley4": synthetic.ackley4}


@lru_cache(maxsize=1)
def _extra() -> dict:
    """Plants of `EXTRA_MODULES` that are there: `PLANTS` (name -> plant or factory) or
    `plants()` (an iterable of plants)."""
    found: dict = {}
    for mod in EXTRA_MODULES:
        try:
            m = importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(mod):
                continue
            raise
        table = getattr(m, "PLANTS", None)
        if table is None and hasattr(m, "plants"):
            table = {p.name: p for p in m.plants()}
        found.update(table or {})
    return found


def names() -> tuple[str, ...]:
    """Every plant name the suite knows (own plants first), with its split in `SPLIT`."""
    return tuple(_own()) + tuple(n for n in _extra() if n not in _own())


@lru_cache(maxsize=None)
def plant(name: str):
    """The plant `name` (built once per process), its `split` set from the split table."""
    table = {**_extra(), **_own()}
    if name not in table:
        raise KeyError(f"unknown plant {name!r}; choose from {', '.join(names())}")
    p = table[name]
    p = p() if isinstance(p, type) or not hasattr(p, "episode") else p
    p.split = split_of(name)
    return p


def split_table() -> list[tuple[str, str, int | str, str]]:
    """`(plant, split, dimensions, drift kinds)` per known plant and per rule of `SPLIT` that names
    no plant (`-`), dev first."""
    rows = [(n, split_of(n), len(plant(n).names), ", ".join(plant(n).drifts)) for n in names()]
    rows += [(n, s, "-", "-") for n, s in SPLIT.items() if n not in names()]  # a family's rule
    return sorted(rows, key=lambda r: r[1] != "dev")


def format_split(rows) -> str:
    lines = ["| plant | split | gains | drift kinds |", "| --- | --- | --- | --- |"]
    lines += [f"| {n} | {s} | {d} | {k} |" for n, s, d, k in rows]
    return "\n".join(lines)
