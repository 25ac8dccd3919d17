"""Strategies of one kind share their read-only Sobol candidate set (issue 15, daemon memory with
many plants), and a shared set proposes exactly what a private copy does."""

import numpy as np
import pytest

from tvbod.core import make_strategy, parse_spec
from tvbod.core.optimize import sobol_unit

SPEC = {"strategy": "et-gp-ucb", "domain": {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 2.0]},
        "sense": "minimize", "noise_variance": 0.01, "seed": 5,
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
