"""Plant files and simulated plants for the open-loop daemon benchmark.

Two kinds, both from the shipped plant files so the optimizer mapping is the one users run:

- `box`: `configs/plants/cartpole.yaml` as shipped (4 gains, ET-GP-UCB, MAP lengthscales refit
  after every tell, `measurement: auto`). The simulated plant is a quadratic bowl with its minimum
  at a random point of the box plus N(0, 0.1^2) noise: smooth, so the trigger rarely resets and
  the dataset keeps growing.
- `arms`: `configs/plants/temperature.yaml` (50 arms, the empirical covariance of the shipped
  Intel Lab training days), the simulated plant replays the standardized test days
  (plant_adapters/temperature), each plant starting at its own column.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tvbod.resources import intel_lab_data, shipped_text

#: Plant kind -> its shipped file.
SHIPPED = {"box": "configs/plants/cartpole.yaml", "arms": "configs/plants/temperature.yaml"}


def plant_mapping(kind: str, name: str, refit_every: int | None = None) -> dict[str, Any]:
    """The shipped file of `kind`, renamed; `refit_every` overrides the MAP refit period (box)."""
    body = yaml.safe_load(shipped_text(SHIPPED[kind]))
    body["name"] = name
    if kind == "arms":
        train = Path(str(intel_lab_data().joinpath("temperature_train.csv")))
        body["optimizer"]["kernel"]["empirical_from"] = str(train.resolve())
    elif refit_every is not None:
        body["optimizer"]["hyperparameters"]["refit_every"] = int(refit_every)
    return body


def write_plant(plants_dir: Path, kind: str, name: str, refit_every: int | None = None) -> Path:
    path = plants_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plant_mapping(kind, name, refit_every), sort_keys=False))
    return path


def _bounds(parameters: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    lower = np.array([float(p["lower"]) for p in parameters])
    upper = np.array([float(p["upper"]) for p in parameters])
    return lower, upper


class SimulatedPlant:
    """A measurement for given gains, and random gains to observe (seeding); seeded per plant."""

    def __init__(self, kind: str, parameters: list[dict], seed: int) -> None:
        self.kind = kind
        self.parameters = parameters
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        if kind == "arms":
            self.stream = _temperature_stream()
            self.column = int(self.rng.integers(len(self.stream)))
        else:
            self.lower, self.upper = _bounds(parameters)
            self.centre = self.rng.uniform(self.lower, self.upper)

    def measure(self, gains: dict[str, Any]) -> float:
        self.steps += 1
        if self.kind == "arms":
            t = (self.column + self.steps) % len(self.stream) + 1
            return self.stream.value(int(gains[self.parameters[0]["name"]]), t)
        g = np.array([float(gains[p["name"]]) for p in self.parameters])
        u = (g - self.centre) / (self.upper - self.lower)
        return float(1.0 + 4.0 * np.sum(u * u) + 0.1 * self.rng.standard_normal())

    def random_gains(self) -> dict[str, Any]:
        if self.kind == "arms":
            return {self.parameters[0]["name"]: int(self.rng.integers(self.parameters[0]["arms"]))}
        g = self.rng.uniform(self.lower, self.upper)
        return {p["name"]: float(v) for p, v in zip(self.parameters, g)}


@lru_cache(maxsize=1)
def _temperature_stream():
    """The standardized shipped test days, read once per process."""
    from plant_adapters.temperature.source import TemperatureStream

    return TemperatureStream.from_data()
