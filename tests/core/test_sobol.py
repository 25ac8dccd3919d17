"""The vendored scrambled Sobol generator is scipy's, bit for bit: replay of every existing state
depends on the candidate set `sobol_unit` returns."""

import numpy as np
import pytest
from scipy.stats import qmc

from tvbod.core.optimize import sobol_unit
from tvbod.core.sobol import MAX_DIM, scrambled_sobol

SEEDS = (0, 1, 7, 2024, 123456789, 2**63 - 1)


def scipy_points(dim: int, m: int, seed: int) -> np.ndarray:
    return qmc.Sobol(dim, scramble=True, seed=seed).random_base2(m)


def assert_same(dim: int, m: int, seed: int) -> None:
    ours, theirs = scrambled_sobol(dim, m, seed), scipy_points(dim, m, seed)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs), (dim, m, seed)


def test_every_dimension_matches_scipy_bit_for_bit():
    for dim in range(1, MAX_DIM + 1):
        for seed in (0, dim, 2**63 - 1):
            for m in (0, 1, 6):
                assert_same(dim, m, seed)


@pytest.mark.parametrize("dim", (1, 2, 3, 4, 8, 13, 32, MAX_DIM))
def test_long_sequences_match_scipy_bit_for_bit(dim):
    for seed in SEEDS:
        assert_same(dim, 10, seed)
    assert_same(dim, 14, 5)


def test_the_candidate_sizes_the_strategies_use_match_scipy():
    """`sobol_unit` as the box strategies call it: `budget.candidates` points, any count."""
    for dim, n, seed in [(4, 1024, 0), (4, 1000, 3), (2, 1, 5), (8, 4096, 11), (3, 2**16, 42),
                         (6, 257, 2**40), (MAX_DIM, 300, 9)]:
        m = max(int(np.ceil(np.log2(max(n, 2)))), 1)
        assert np.array_equal(sobol_unit(dim, n, seed), scipy_points(dim, m, seed)[:n]), (dim, n)


def test_above_the_vendored_dimensions_scipy_itself_is_used():
    dim = MAX_DIM + 1
    assert np.array_equal(sobol_unit(dim, 64, 3), scipy_points(dim, 6, 3))
    with pytest.raises(ValueError, match="outside"):
        scrambled_sobol(dim, 6, 3)


def test_the_points_are_a_balanced_low_discrepancy_set():
    """Independent of scipy: 2^m scrambled Sobol points put exactly one point in each of the 2^m
    intervals [k/2^m, (k+1)/2^m) of every coordinate (a (0, m, 1)-net per dimension)."""
    x = scrambled_sobol(5, 8, 1)
    assert np.all((x >= 0) & (x < 1))
    for j in range(5):
        assert sorted(np.floor(x[:, j] * 256).astype(int)) == list(range(256))
