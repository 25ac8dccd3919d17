"""Strategies of one kind share their read-only Sobol candidate set (daemon memory with
many plants), and a shared set proposes exactly what a private copy does."""

import numpy as np
import pytest

from tvbod.core import make_strategy, parse_spec
from tvbod.core.optimize import sobol_unit

SPEC = {"strategy": "et-gp-ucb",
        "domain": {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 2.0]}, "sense": "minimize", "noise_variance": 0.01, "seed": 5,
        "budget": {"candidates": 128, "starts": 2, "maxiter": 20}}


def test_strategies_with_the_same_dimension_count_and_seed_share_one_read_only_sobol_set():
    a, b = make_strategy(parse_spec(SPEC)), make_strategy(parse_spec(SPEC))
    other = make_strategy(parse_spec({**SPEC, "seed": 6}))
    assert a._unit is b._unit and other._unit is not a._unit
    assert np.array_equal(a._unit, sobol_unit(2, 128, 5))
    with pytest.raises(ValueError):
        a._unit[0, 0] = 0.5  # nobody may change what the others use


def test_a_shared_sobol_set_proposes_bit_identically_to_a_private_copy():
    shared, private = make_strategy(parse_spec(SPEC)), make_strategy(parse_spec(SPEC))
    private._unit = sobol_unit(2, 128, 5)  # the strategy's own writable array, as before
    assert private._unit.flags.writeable and private._unit is not shared._unit
    for t in range(8):
        x, x_private = shared.ask(), private.ask()
        assert np.array_equal(x, x_private), t
        y = float((x[0] - 0.3) ** 2 + (x[1] - 1.1) ** 2) + 0.01 * np.sin(t)
        shared.tell(x, y)
        private.tell(x, y)
    assert shared.state_dict() == private.state_dict()


def _factor_after(n: int, refactor: bool):
    from tvbod.core.gp import ExactGP
    from tvbod.core.kernels import SquaredExponential

    rng = np.random.default_rng(n)
    gp = ExactGP(SquaredExponential(np.array([0.3, 0.5])), 0.01)
    for i in range(n):
        gp.append(rng.uniform(size=2), float(rng.standard_normal()), float(i + 1))
    if refactor:
        gp.refactor()  # scipy's cholesky: a Fortran-ordered factor
    return gp


@pytest.mark.parametrize("refactor", [False, True])
def test_a_packed_factor_reads_back_bit_for_bit_in_its_memory_order(refactor):
    gp = _factor_after(90, refactor)
    L = gp.L_.copy(order="K")
    flags = (gp.L_.flags.c_contiguous, gp.L_.flags.f_contiguous)
    assert gp.pack_factor() and gp._L is None
    assert gp._L_packed.nbytes == 8 * 90 * 91 // 2
    back = gp.L_
    assert np.array_equal(back, L) and (back.flags.c_contiguous, back.flags.f_contiguous) == flags
    assert back.tobytes(order="A") == L.tobytes(order="A")


def test_small_factors_are_not_packed():
    gp = _factor_after(10, False)
    assert not gp.pack_factor() and gp._L is not None


def test_a_strategy_compacted_after_every_tell_and_ask_proposes_bit_identically():
    spec = {**SPEC, "budget": {"candidates": 64, "starts": 1, "maxiter": 10}}
    packed, plain = make_strategy(parse_spec(spec)), make_strategy(parse_spec(spec))
    rng = np.random.default_rng(1)
    was_packed = 0
    for t in range(100):  # past PACK_MIN_N points, so the factor is really packed
        if t % 10 == 9:
            x, x_plain = packed.ask(), plain.ask()
            assert np.array_equal(x, x_plain), t
        else:
            x = x_plain = np.array([rng.uniform(0, 1), rng.uniform(0, 2)])
        y = float((x[0] - 0.3) ** 2 + (x[1] - 1.1) ** 2 + 0.05 * rng.standard_normal())
        r, r_plain = packed.tell(x, y), plain.tell(x_plain, y)
        assert r == r_plain, t
        packed.compact()
        was_packed += packed.gp._L is None
        packed.settle()
        packed.compact()
    assert was_packed >= 20
    assert packed.state_dict() == plain.state_dict()
    assert np.array_equal(packed.gp.L_, plain.gp.L_)
