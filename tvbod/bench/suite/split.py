"""The dev / held-out split of the suite's plants: one table (`SPLIT`), printed by every run."""

from __future__ import annotations

#: The split of every plant: defaults are chosen on `dev` cells only; `held-out` cells are
#: reported apart. Every plant of the TuneControl family (`EXTRA_MODULES`) is held-out.
SPLIT = {
    "cartpole": "dev",
    "hartmann3": "dev",
    "dc-motor": "dev",
    "temperature": "held-out",
    "ackley4": "held-out",
    "TuneControl family (tunecontrol.py)": "held-out",
}
