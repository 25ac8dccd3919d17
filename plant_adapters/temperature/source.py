"""Intel Berkeley Lab temperatures as a time-varying 50-arm bandit: data, kernel, stream, raw.

The only module of this plant that touches files (numpy + stdlib only).

Shipped split (`data/`, see `data/README.md`): `train` `(50, 144)` = 3 days, `test` `(50, 96)` =
the 2 following days, one row per sensor, 30-minute columns, degrees Celsius. As in the ET-GP-UCB
paper (Brunzema et al., arXiv 2208.10790, Sec. VI-A, after Bogunovic et al. 2016):

    z = (T - m) / s,  m, s = mean and std (ddof 0) of *all* training values
    K = cov(z_train rows)               `(50, 50)`, the GP kernel over the arms (np.cov, ddof 1)
    f_t(arm) = z_test[arm, t - 1],  t = 1..96,  regret r_t = max_a f_t(a) - f_t(chosen)

`K` is `tvbod.core.kernels.empirical_covariance(z_train)`; a plant file's `empirical_from` gets
the same (standardizing by the same global mean/std), rounded to 12 decimals. On the shipped data it is positive definite but badly
conditioned: 50 rows x 144 samples, eigenvalues 8.1e-5 .. 40.3 (condition number 5.0e5); nothing
is added here, a jitter belongs to the GP.

Raw reader, for users with the original `data.txt` (db.csail.mit.edu/labdata/labdata.html), one
whitespace-separated reading per line: `date time epoch moteid temperature humidity light voltage`,
e.g. `2004-03-31 03:38:15.757551 2 1 122.153 -3.91901 11.04 2.03397`. Preprocessing:

1. `read_raw`: a non-blank line without all 8 fields, or whose date/time, epoch, mote id or
   temperature does not parse, is skipped and counted (`skipped`). A temperature outside
   `[-10, 60]` C (dying motes report ~122 C) is dropped and counted (`implausible`).
2. `bin_means`: readings go to half-open bins `[start + i dt, start + (i+1) dt)`; the value of a
   (mote, bin) is the plain mean of its readings, nan if it has none. `start` defaults to the first
   reading floored to a multiple of `dt` since midnight, `end` to just past the last reading.
3. `resample`: a mote is kept only if at least `min_coverage` (0.9) of its bins are non-empty (and,
   if `max_gap` is given, no run of empty bins is longer than `max_gap`); the empty bins of kept
   motes are filled by linear interpolation in time between the neighbouring non-empty bins (bins
   before the first / after the last non-empty bin take that bin's value). Rows are sorted by mote.
4. `split_days`: the first `train_days` days of bins are the training part, the next `test_days`
   the test part (`start` at midnight gives calendar days). The paper's setup is
   `resample(read_raw(p), interval_minutes=10, start=..., end=...)` then `split_days(..., 3, 2)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

#: The shipped CSV split (package data, read through importlib.resources).
DATA_DIR = files("plant_adapters.temperature").joinpath("data")
#: Plausible temperatures [C]; readings outside are dropped by `read_raw`.
VALID_RANGE = (-10.0, 60.0)


# ---------------------------------------------------------------------- shipped split, kernel
def load_split(data_dir: Path | str | Traversable = DATA_DIR) -> tuple[np.ndarray, np.ndarray]:
    """`(train, test)`: `temperature_train.csv` `(50, 144)`, `temperature_test.csv` `(50, 96)`."""
    d = Path(data_dir) if isinstance(data_dir, str) else data_dir
    with d.joinpath("temperature_train.csv").open("r") as f:
        train = np.loadtxt(f, delimiter=",", ndmin=2)
    with d.joinpath("temperature_test.csv").open("r") as f:
        test = np.loadtxt(f, delimiter=",", ndmin=2)
    if train.shape[0] != test.shape[0]:
        raise ValueError(f"train has {train.shape[0]} sensors but test has {test.shape[0]}; "
                         "both files must list the same sensors in the same order")
    if not (np.isfinite(train).all() and np.isfinite(test).all()):
        raise ValueError(f"{d}: the temperature CSVs must not contain missing values")
    return train, test


def standardize(train: np.ndarray, test: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """`(z_train, z_test, m, s)`: `z = (T - m) / s`; `m`, `s` = mean, std (ddof 0) of `train`."""
    m, s = float(np.mean(train)), float(np.std(train))
    if not s > 0:
        raise ValueError("the training temperatures are constant; they cannot be standardized")
    return (train - m) / s, (test - m) / s, m, s


# ---------------------------------------------------------------------- the test-day stream
class Step(NamedTuple):
    """One test step: `t` (1-based) and `values` `(arms,)` = `f_t` for every arm."""

    t: int
    values: np.ndarray


class TemperatureStream:
    """`f_t(arm) = test_z[arm, t - 1]` for `t = 1..T`; regret `max_a f_t(a) - f_t(arm)`.

    Pace (`speed`) is the adapter's business; this is the pure table."""

    def __init__(self, test_z: np.ndarray) -> None:
        self.test_z = np.asarray(test_z, dtype=float)
        if self.test_z.ndim != 2 or 0 in self.test_z.shape:
            raise ValueError("test_z must be a non-empty (arms, steps) array, "
                             f"got {self.test_z.shape}")

    @classmethod
    def from_data(cls, data_dir: Path | str = DATA_DIR) -> TemperatureStream:
        """The standardized shipped test days."""
        _, test_z, _, _ = standardize(*load_split(data_dir))
        return cls(test_z)

    @property
    def arms(self) -> int:
        return self.test_z.shape[0]

    def __len__(self) -> int:
        return self.test_z.shape[1]

    def values(self, t: int) -> np.ndarray:
        """`f_t` `(arms,)`."""
        if not 1 <= t <= len(self):
            raise IndexError(f"test step t={t} outside 1..{len(self)}")
        return self.test_z[:, t - 1]

    def value(self, arm: int, t: int) -> float:
        if not 0 <= arm < self.arms:
            raise IndexError(f"arm {arm} outside 0..{self.arms - 1}")
        return float(self.values(t)[arm])

    def best(self, t: int) -> float:
        """`max_a f_t(a)`."""
        return float(self.values(t).max())

    def best_arm(self, t: int) -> int:
        return int(self.values(t).argmax())

    def regret(self, arm: int, t: int) -> float:
        """`max_a f_t(a) - f_t(arm) >= 0`."""
        return self.best(t) - self.value(arm, t)

    def __iter__(self) -> Iterator[Step]:
        for t in range(1, len(self) + 1):
            yield Step(t, self.values(t))


# ---------------------------------------------------------------------- raw Intel Lab format
@dataclass(frozen=True)
class RawReadings:
    """Parsed readings `(n,)` each: `times` (datetime64[us]), `motes` (int), `temperature` [C];
    `lines` non-blank lines read, `skipped` malformed lines, `implausible` dropped temperatures."""

    times: np.ndarray
    motes: np.ndarray
    temperature: np.ndarray
    lines: int
    skipped: int
    implausible: int


def _parse_line(fields: list[str]) -> tuple[datetime, int, float] | None:
    if len(fields) != 8:
        return None
    try:
        when = datetime.fromisoformat(f"{fields[0]} {fields[1]}")
        int(fields[2])
        return when, int(fields[3]), float(fields[4])
    except ValueError:
        return None


def read_raw(path: Path | str, valid: tuple[float, float] = VALID_RANGE) -> RawReadings:
    """Parse an Intel Lab `data.txt`: skip malformed lines, drop temperatures outside `valid`."""
    times, motes, temps = [], [], []
    lines = skipped = implausible = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            fields = line.split()
            if not fields:
                continue
            lines += 1
            rec = _parse_line(fields)
            if rec is None:
                skipped += 1
            elif not valid[0] <= rec[2] <= valid[1]:   # also drops nan
                implausible += 1
            else:
                times.append(rec[0])
                motes.append(rec[1])
                temps.append(rec[2])
    return RawReadings(np.array(times, dtype="datetime64[us]"), np.array(motes, dtype=np.int64),
                       np.array(temps, dtype=float), lines, skipped, implausible)


def _default_start(times: np.ndarray, dt: np.timedelta64) -> np.datetime64:
    first = times.min()
    midnight = first.astype("datetime64[D]").astype("datetime64[us]")
    return midnight + ((first - midnight) // dt) * dt


def bin_means(readings: RawReadings, interval_minutes: float = 10, start: datetime | None = None,
              end: datetime | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(mote_ids (m,), bin starts (n,), means (m, n))`; nan where a mote has no reading."""
    if len(readings.times) == 0:
        raise ValueError("no valid readings to resample")
    dt = np.timedelta64(int(round(interval_minutes * 60e6)), "us")
    if dt <= np.timedelta64(0, "us"):
        raise ValueError("interval_minutes must be > 0")
    t0 = _default_start(readings.times, dt) if start is None else np.datetime64(start, "us")
    t1 = readings.times.max() + np.timedelta64(1, "us") if end is None else np.datetime64(end, "us")
    n = int(-(-(t1 - t0) // dt))
    if n <= 0:
        raise ValueError(f"end {t1} is not after start {t0}")
    inside = (readings.times >= t0) & (readings.times < t1)
    ids, row = np.unique(readings.motes[inside], return_inverse=True)
    flat = row * n + ((readings.times[inside] - t0) // dt).astype(np.int64)
    sums = np.bincount(flat, weights=readings.temperature[inside], minlength=len(ids) * n)
    counts = np.bincount(flat, minlength=len(ids) * n)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (sums / counts).reshape(len(ids), n)
    return ids, t0 + dt * np.arange(n), means


def _longest_gap(empty: np.ndarray) -> int:
    padded = np.concatenate(([0], empty.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return int((edges[1::2] - edges[::2]).max()) if len(edges) else 0


def resample(readings: RawReadings, interval_minutes: float = 10, start: datetime | None = None,
             end: datetime | None = None, *, min_coverage: float = 0.9,
             max_gap: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(mote_ids (m,), times (n,), matrix (m, n))` on a regular grid, gaps interpolated.

    Keeps a mote iff `non-empty bins / n >= min_coverage` (and its longest run of empty bins is
    `<= max_gap`, if given); fills its empty bins by `np.interp` over the bin index (linear inside,
    nearest value at the ends). Raises if no mote is kept."""
    ids, times, means = bin_means(readings, interval_minutes, start, end)
    empty = np.isnan(means)
    keep = (1.0 - empty.mean(axis=1)) >= min_coverage
    if max_gap is not None:
        keep &= np.array([_longest_gap(e) <= max_gap for e in empty])
    if not keep.any():
        raise ValueError(f"no mote has >= {min_coverage:.0%} non-empty {interval_minutes}-minute "
                         "bins; lower min_coverage or choose a shorter start..end window")
    grid = np.arange(len(times))
    matrix = means[keep].copy()
    for row, gaps in zip(matrix, empty[keep]):
        if gaps.any():
            row[gaps] = np.interp(grid[gaps], grid[~gaps], row[~gaps])
    return ids[keep], times, matrix


def split_days(matrix: np.ndarray, times: np.ndarray, train_days: int = 3,
               test_days: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """`(train, test)`: columns in `[t_0, t_0 + train_days)` and the following `test_days` days,
    `t_0 = times[0]` (bins are labelled by their start)."""
    times = np.asarray(times, dtype="datetime64[us]")
    day = np.timedelta64(1, "D")
    cut, stop = times[0] + train_days * day, times[0] + (train_days + test_days) * day
    step = times[1] - times[0] if len(times) > 1 else np.timedelta64(0, "us")
    if times[-1] + step < stop:
        raise ValueError(f"the grid ends at {times[-1]}, before {train_days}+{test_days} days "
                         f"from {times[0]}; resample a longer window")
    return matrix[:, times < cut], matrix[:, (times >= cut) & (times < stop)]
