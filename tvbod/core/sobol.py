"""Scrambled Sobol points without `scipy.stats` (whose import is ~1 s of a daemon's start).

`scrambled_sobol(dim, m, seed)` returns the first `2**m` points of the sequence
`scipy.stats.qmc.Sobol(dim, scramble=True, seed=seed)` gives (30 bits, a linear matrix scramble
plus a digital shift drawn from `numpy.random.default_rng(seed)`), bit for bit, for `dim` up to
`MAX_DIM`; tests/core/test_sobol.py checks it against scipy over many dimensions, seeds and sizes.
The direction numbers are the first `MAX_DIM` of S. Joe and F. Y. Kuo's `new-joe-kuo-6.21201`
(https://web.maths.unsw.edu.au/~fkuo/sobol/), the set scipy ships.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

BITS = 30
#: (primitive polynomial, initial direction numbers m_1..m_s) of dimensions 2..MAX_DIM; the first
#: dimension is the van der Corput sequence (all direction numbers 1).
_DIRECTIONS: tuple[tuple[int, tuple[int, ...]], ...] = (
    (3, (1,)),
    (7, (1, 3,)),
    (11, (1, 3, 1,)),
    (13, (1, 1, 1,)),
    (19, (1, 1, 3, 3,)),
    (25, (1, 3, 5, 13,)),
    (37, (1, 1, 5, 5, 17,)),
    (41, (1, 1, 5, 5, 5,)),
    (47, (1, 1, 7, 11, 19,)),
    (55, (1, 1, 5, 1, 1,)),
    (59, (1, 1, 1, 3, 11,)),
    (61, (1, 3, 5, 5, 31,)),
    (67, (1, 3, 3, 9, 7, 49,)),
    (91, (1, 1, 1, 15, 21, 21,)),
    (97, (1, 3, 1, 13, 27, 49,)),
    (103, (1, 1, 1, 15, 7, 5,)),
    (109, (1, 3, 1, 15, 13, 25,)),
    (115, (1, 1, 5, 5, 19, 61,)),
    (131, (1, 3, 7, 11, 23, 15, 103,)),
    (137, (1, 3, 7, 13, 13, 15, 69,)),
    (143, (1, 1, 3, 13, 7, 35, 63,)),
    (145, (1, 3, 5, 9, 1, 25, 53,)),
    (157, (1, 3, 1, 13, 9, 35, 107,)),
    (167, (1, 3, 1, 5, 27, 61, 31,)),
    (171, (1, 1, 5, 11, 19, 41, 61,)),
    (185, (1, 3, 5, 3, 3, 13, 69,)),
    (191, (1, 1, 7, 13, 1, 19, 1,)),
    (193, (1, 3, 7, 5, 13, 19, 59,)),
    (203, (1, 1, 3, 9, 25, 29, 41,)),
    (211, (1, 3, 5, 13, 23, 1, 55,)),
    (213, (1, 3, 7, 3, 13, 59, 17,)),
    (229, (1, 3, 1, 3, 5, 53, 69,)),
    (239, (1, 1, 5, 5, 23, 33, 13,)),
    (241, (1, 1, 7, 7, 1, 61, 123,)),
    (247, (1, 1, 7, 9, 13, 61, 49,)),
    (253, (1, 3, 3, 5, 3, 55, 33,)),
    (285, (1, 3, 1, 15, 31, 13, 49, 245,)),
    (299, (1, 3, 5, 15, 31, 59, 63, 97,)),
    (301, (1, 3, 1, 11, 11, 11, 77, 249,)),
    (333, (1, 3, 1, 11, 27, 43, 71, 9,)),
    (351, (1, 1, 7, 15, 21, 11, 81, 45,)),
    (355, (1, 3, 7, 3, 25, 31, 65, 79,)),
    (357, (1, 3, 1, 1, 19, 11, 3, 205,)),
    (361, (1, 1, 5, 9, 19, 21, 29, 157,)),
    (369, (1, 3, 7, 11, 1, 33, 89, 185,)),
    (391, (1, 3, 3, 3, 15, 9, 79, 71,)),
    (397, (1, 3, 7, 11, 15, 39, 119, 27,)),
    (425, (1, 1, 3, 1, 11, 31, 97, 225,)),
    (451, (1, 1, 1, 3, 23, 43, 57, 177,)),
    (463, (1, 3, 7, 7, 17, 17, 37, 71,)),
    (487, (1, 3, 1, 5, 27, 63, 123, 213,)),
    (501, (1, 1, 3, 5, 11, 43, 53, 133,)),
    (529, (1, 3, 5, 5, 29, 17, 47, 173, 479,)),
    (539, (1, 3, 3, 11, 3, 1, 109, 9, 69,)),
    (545, (1, 1, 1, 5, 17, 39, 23, 5, 343,)),
    (557, (1, 3, 1, 5, 25, 15, 31, 103, 499,)),
    (563, (1, 1, 1, 11, 11, 17, 63, 105, 183,)),
    (601, (1, 1, 5, 11, 9, 29, 97, 231, 363,)),
    (607, (1, 1, 5, 15, 19, 45, 41, 7, 383,)),
    (617, (1, 3, 7, 7, 31, 19, 83, 137, 221,)),
    (623, (1, 1, 1, 3, 23, 15, 111, 223, 83,)),
    (631, (1, 1, 5, 13, 31, 15, 55, 25, 161,)),
    (637, (1, 1, 3, 13, 25, 47, 39, 87, 257,)),
)
MAX_DIM = len(_DIRECTIONS) + 1


@lru_cache(maxsize=8)
def _direction_matrix(dim: int) -> np.ndarray:
    """`(dim, BITS)` direction numbers v_{d,j} * 2^(BITS-1-j) (Bratley and Fox's recurrence)."""
    v = np.ones((dim, BITS), dtype=np.int64)
    for d in range(1, dim):
        poly, initial = _DIRECTIONS[d - 1]
        s = len(initial)
        row = list(initial) + [0] * (BITS - s)
        for j in range(s, BITS):
            new = row[j - s]
            for k in range(1, s + 1):
                if (poly >> (s - k)) & 1:
                    new ^= row[j - k] << k
            row[j] = new
        v[d] = row
    v <<= np.arange(BITS - 1, -1, -1, dtype=np.int64)
    v.flags.writeable = False
    return v


def _scramble(v: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The digital shift `(dim,)` and the scrambled direction numbers `(dim, BITS)`: each
    dimension's numbers, as bit columns (most significant first), times a random unit lower
    triangular matrix over GF(2). Draws in the order scipy draws them."""
    dim = v.shape[0]
    shift_bits = rng.integers(2, size=(dim, BITS), dtype=np.uint32)
    shift = shift_bits.astype(np.int64) @ (np.int64(1) << np.arange(BITS, dtype=np.int64))
    lower = np.tril(rng.integers(2, size=(dim, BITS, BITS), dtype=np.uint32)).astype(np.int64)
    lower[:, np.arange(BITS), np.arange(BITS)] = 1
    msb_first = np.arange(BITS - 1, -1, -1, dtype=np.int64)
    bits = (v[:, None, :] >> msb_first[None, :, None]) & 1  # (dim, bit k, column j)
    product = np.einsum("dpk,dkj->dpj", lower, bits) & 1
    scrambled = (product << msb_first[None, :, None]).sum(axis=1)
    return shift, scrambled


def scrambled_sobol(dim: int, m: int, seed: int) -> np.ndarray:
    """The first `2**m` scrambled Sobol points in `[0, 1)^dim`, `(2**m, dim)` float64."""
    if not 1 <= dim <= MAX_DIM:
        raise ValueError(f"dim {dim} is outside [1, {MAX_DIM}]")
    if not 0 <= m <= BITS:
        raise ValueError(f"m {m} is outside [0, {BITS}]")
    shift, v = _scramble(_direction_matrix(dim), np.random.default_rng(seed))
    k = np.arange(2**m, dtype=np.uint32)
    gray = k ^ (k >> np.uint32(1))  # point k XORs the direction numbers of its Gray code's bits
    points = np.broadcast_to(shift.astype(np.uint32), (len(k), dim)).copy()
    columns = v.astype(np.uint32)
    for b in range(m):
        points ^= ((gray >> np.uint32(b)) & np.uint32(1))[:, None] * columns[:, b][None, :]
    return points * (1.0 / 2**BITS)
