"""Side files of a plant file's `optimizer.kernel`: a matrix kernel's `matrix: FILE` (CSV or
`.npy`) and `empirical_from: FILE.csv` (the arms' sample rows, whose covariance becomes the
matrix). Read when the plant file is; the optimizer mapping holds the matrix itself."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tvbod.core.kernels import empirical_covariance
from tvbod.core.validate import InvalidValue, check_keys as _check_keys, choice as _choice
from tvbod.core.validate import string as _string

#: Decimals kept of an empirical covariance, so its fingerprint does not depend on BLAS round-off.
_EMPIRICAL_DECIMALS = 12


#: Side-file formats of a matrix (`matrix: FILE`): by the file name's suffix.
MATRIX_FILE_SUFFIXES = (".csv", ".npy")


def read_matrix_file(path: Path, key: str) -> np.ndarray:
    """A 2-D array of finite numbers from a CSV (comma-separated rows) or a `.npy` file; a
    mistake is an `InvalidValue` for `key` naming the file. Shape, symmetry and positive
    semi-definiteness are the core's checks, as for the inline form."""
    suffix = path.suffix.lower()
    if suffix not in MATRIX_FILE_SUFFIXES:
        raise InvalidValue(key, f"{path}: the file name must end in .csv or .npy",
                           "a list of lists of numbers, or a FILE.csv / FILE.npy path")
    try:
        if suffix == ".npy":
            a = np.load(path, allow_pickle=False)
        else:
            a = np.loadtxt(path, delimiter=",", ndmin=2, dtype=float)
    except OSError as e:
        raise InvalidValue(key, f"cannot read {path} ({e.strerror or e})") from None
    except (ValueError, EOFError) as e:
        kind = "an .npy array of numbers" if suffix == ".npy" else "a CSV of numbers"
        raise InvalidValue(key, f"{path} is not {kind} ({e})") from None
    if a.dtype.kind not in "biuf" or a.ndim != 2 or a.size == 0:
        raise InvalidValue(key, f"{path} holds a {a.ndim}-D {a.dtype} array of shape {a.shape}; "
                           "a matrix kernel needs a non-empty 2-D array of numbers")
    a = a.astype(float)
    if not np.all(np.isfinite(a)):
        raise InvalidValue(key, f"{path} holds a value that is not finite (NaN or infinity)")
    return a


def empirical_kernel(kernel: Mapping, arms: int | None, base: Path) -> dict:
    key = "optimizer.kernel.empirical_from"
    if arms is None:
        raise InvalidValue(key, "is for an arm parameter; a continuous domain needs", "se, matern52")
    _check_keys(kernel, {"type", "empirical_from"}, "optimizer.kernel.")
    _choice(kernel.get("type", "matrix"), "optimizer.kernel.type", ("matrix",))
    csv = base / _string(kernel["empirical_from"], key)
    try:
        samples = np.loadtxt(csv, delimiter=",", ndmin=2, dtype=float)
    except OSError as e:
        raise InvalidValue(key, f"cannot read {csv} ({e.strerror or e})") from None
    except ValueError as e:
        raise InvalidValue(key, f"{csv} is not a CSV of numbers ({e})") from None
    if samples.shape[0] != arms:
        raise InvalidValue(key, f"{csv} has {samples.shape[0]} rows, one per arm, but the arm parameter "
                       f"has {arms} arms")
    if samples.shape[1] < 2 or not np.all(np.isfinite(samples)) or np.std(samples) == 0:
        raise InvalidValue(key, f"{csv} needs at least 2 columns of finite, not all equal, numbers")
    K = empirical_covariance(samples, standardize=True, decimals=_EMPIRICAL_DECIMALS)
    return {"type": "matrix", "matrix": K.tolist()}
