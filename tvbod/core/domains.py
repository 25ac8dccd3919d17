"""Where the optimizer searches: a box, a finite set of points, or a finite set of arms.

Each domain maps physical points (the controller gains a plant adapter sees) to *internal*
coordinates, the inputs of the kernel. Finite domains are represented internally by the point's
index, so their kernels can be precomputed Gram matrices.
"""

from __future__ import annotations

import numpy as np

from .errors import DomainError

#: Relative tolerance when matching a told point to one of a finite domain's points.
_MATCH_RTOL = 1e-9


class BoxDomain:
    """A box `[lower, upper]` in physical units.

    Internal coordinates are `z = (x - offset) / scale`. Without `scaling` the box maps onto the
    unit cube (`offset = lower`, `scale = upper - lower`); with per-dimension `scaling` factors
    `s > 0` the kernel acts on `x / s` (`offset = 0`), as the ET-GP-UCB policy search does.
    """

    finite = False

    def __init__(self, lower, upper, scaling=None) -> None:
        self.lower = np.asarray(lower, dtype=float).reshape(-1)
        self.upper = np.asarray(upper, dtype=float).reshape(-1)
        if self.lower.shape != self.upper.shape or not np.all(self.lower < self.upper):
            raise DomainError("box needs lower < upper elementwise, with equal lengths")
        self.dim = self.lower.size
        if scaling is None:
            self.offset = self.lower.copy()
            self.scale = self.upper - self.lower
        else:
            s = np.asarray(scaling, dtype=float).reshape(-1)
            if s.shape != self.lower.shape or not np.all(s > 0):
                raise DomainError("scaling needs one positive factor per dimension")
            self.offset = np.zeros(self.dim)
            self.scale = s
        a = (self.lower - self.offset) / self.scale
        b = (self.upper - self.offset) / self.scale
        self.z_lower = np.minimum(a, b)
        self.z_upper = np.maximum(a, b)

    def to_internal(self, x: np.ndarray) -> np.ndarray:
        """Validate a physical point `(d,)` and map it to internal coordinates."""
        x = np.asarray(x, dtype=float)
        if x.shape != (self.dim,):
            raise DomainError(f"point must have shape ({self.dim},), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise DomainError("point has non-finite coordinates")
        tol = 1e-9 * (self.upper - self.lower)
        if np.any(x < self.lower - tol) or np.any(x > self.upper + tol):
            raise DomainError(
                f"point {x.tolist()} is outside the box [{self.lower.tolist()}, {self.upper.tolist()}]"
            )
        z = (np.clip(x, self.lower, self.upper) - self.offset) / self.scale
        return np.clip(z, self.z_lower, self.z_upper)

    def to_physical(self, z: np.ndarray) -> np.ndarray:
        """Map internal coordinates back to the physical box (clipped against round-off)."""
        x = np.asarray(z, dtype=float) * self.scale + self.offset
        return np.clip(x, self.lower, self.upper)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` uniform internal points, `(n, d)`."""
        return self.z_lower + rng.random((n, self.dim)) * (self.z_upper - self.z_lower)


class PointsDomain:
    """A finite set of physical points `(m, d)`, e.g. a grid; the kernel acts on `(x - offset)/scale`.

    Internally a point is its row index (as a `(1,)` float array), so the Gram matrix over all
    points can be computed once. Without `scaling`, coordinates are used as given.
    """

    finite = True

    def __init__(self, points, scaling=None) -> None:
        p = np.asarray(points, dtype=float)
        if p.ndim != 2 or p.shape[0] < 1 or not np.all(np.isfinite(p)):
            raise DomainError("points must be a finite (m, d) array with m >= 1")
        self.points = p
        self.size, self.dim = p.shape
        s = np.ones(self.dim) if scaling is None else np.asarray(scaling, dtype=float).reshape(-1)
        if s.shape != (self.dim,) or not np.all(s > 0):
            raise DomainError("scaling needs one positive factor per dimension")
        self.kernel_inputs = p / s
        span = np.ptp(p, axis=0)
        self._tol = _MATCH_RTOL * np.maximum(span, 1.0)

    def to_internal(self, x: np.ndarray) -> np.ndarray:
        """Index of the told point among the domain's points, as a `(1,)` array."""
        x = np.asarray(x, dtype=float)
        if x.shape != (self.dim,):
            raise DomainError(f"point must have shape ({self.dim},), got {x.shape}")
        hits = np.flatnonzero(np.all(np.abs(self.points - x) <= self._tol, axis=1))
        if hits.size == 0:
            raise DomainError(f"point {x.tolist()} is not one of the domain's {self.size} points")
        return np.array([float(hits[0])])

    def to_physical(self, z: np.ndarray) -> np.ndarray:
        return self.points[int(np.asarray(z).reshape(-1)[0])].copy()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(0, self.size, size=(n, 1)).astype(float)


class ArmsDomain:
    """`m` arms identified by their index; the kernel is a fixed `(m, m)` covariance matrix.

    `ask()` returns the arm index as an integer array of shape `(1,)`; `tell` takes the index (an
    int, or a one-element array).
    """

    finite = True
    dim = 1

    def __init__(self, n_arms: int) -> None:
        if int(n_arms) < 1:
            raise DomainError("arms domain needs at least one arm")
        self.size = int(n_arms)

    def to_internal(self, x) -> np.ndarray:
        a = np.asarray(x).reshape(-1)
        if a.size != 1:
            raise DomainError(f"an arm is one index, got shape {np.asarray(x).shape}")
        v = float(a[0])
        if not np.isfinite(v) or v != int(v) or not 0 <= int(v) < self.size:
            raise DomainError(f"arm index must be an integer in [0, {self.size - 1}], got {a[0]!r}")
        return np.array([float(int(v))])

    def to_physical(self, z: np.ndarray) -> np.ndarray:
        return np.array([int(np.asarray(z).reshape(-1)[0])], dtype=np.int64)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(0, self.size, size=(n, 1)).astype(float)


Domain = BoxDomain | PointsDomain | ArmsDomain
