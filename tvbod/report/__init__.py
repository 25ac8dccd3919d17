"""The operator's view of a plant: `collect` (tvbod/report/data.py) reads a plant's state
directory into a `PlantReport`, `render` (page.py) turns it into one self-contained HTML page
with inline SVG charts (svg.py). `tvbod report` (tvbod/commands/report.py) is the command."""

from tvbod.report.data import PlantReport, collect
from tvbod.report.page import render

__all__ = ["PlantReport", "collect", "render"]
