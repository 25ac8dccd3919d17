"""The files a deployment needs besides the code, read with `importlib.resources`.

They ship inside the package (the wheel and the sdist carry copies; in a checkout
`tvbod/shipped/{configs,systemd,LICENSE}` are symbolic links to the top-level files, which stay
the single source):

- `configs/`: the default daemon file, plant files and adapter settings;
- `systemd/`: `tvbod.service`, `tvbod-adapter@.service` and `tvbod-adapter-command@.service`;
- `LICENSE`;
- the Intel Lab temperature CSVs and their attribution, in `plant_adapters/temperature/data/`.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

#: The temperature data files (`plant_adapters/temperature/data/`) and their attribution.
INTEL_LAB_FILES = ("temperature_train.csv", "temperature_test.csv", "README.md")


def shipped(relative: str = "") -> Traversable:
    """`configs/...`, `systemd/...` or `LICENSE` inside the installed package."""
    node = files("tvbod").joinpath("shipped")
    for part in filter(None, relative.split("/")):
        node = node.joinpath(part)
    return node


def shipped_text(relative: str) -> str:
    """The text of a shipped file, e.g. `shipped_text("configs/tvbod.yaml")`."""
    return shipped(relative).read_text(encoding="utf-8")


def intel_lab_data() -> Traversable:
    """The directory of the shipped Intel Lab CSVs (`plant_adapters/temperature/data`)."""
    return files("plant_adapters.temperature").joinpath("data")
