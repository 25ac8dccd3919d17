"""The validator kit (tvbod/core/validate.py) that the optimizer spec and the daemon's files share:
one judgement and one wording per kind of mistake, and defaults read from the dataclasses."""

from dataclasses import dataclass, field

import numpy as np
import pytest

from tvbod.core import SpecError, parse_spec
from tvbod.core.errors import InvalidValue
from tvbod.core.spec import OptimizerSpec
from tvbod.core.spec_sections import ExplorationSpec
from tvbod.core.validate import check_keys, choice, defaults, integer, number, vector

BOX = {"type": "box", "lower": [0.0], "upper": [1.0]}


def test_number_names_the_key_and_the_range_with_open_and_closed_ends():
    assert number(0.5, "a", 0.0, 1.0, lo_open=True, hi_open=True) == 0.5
    assert number(np.float32(0.25), "a") == 0.25  # numpy scalars are numbers too
    with pytest.raises(InvalidValue) as e:
        number(1.0, "x.y", 0.0, 1.0, lo_open=True, hi_open=True)
    assert (e.value.key, e.value.problem, e.value.allowed) == ("x.y", "1.0 is out of range",
                                                               "(0.0, 1.0)")
    for bad in (True, "1", None, float("nan"), float("inf")):
        with pytest.raises(InvalidValue):
            number(bad, "x")


def test_integer_choice_keys_and_vector():
    assert integer(np.int64(3), "n", 1) == 3 and type(integer(np.int64(3), "n", 1)) is int
    with pytest.raises(InvalidValue, match=r"must be an integer, got True"):
        integer(True, "n", 0)
    with pytest.raises(InvalidValue) as e:
        choice("z", "kind", ("a", "b"))
    assert e.value.allowed == "a, b"
    with pytest.raises(InvalidValue) as e:
        check_keys({"a": 1, "q": 2}, {"a", "b"}, "sec.")
    assert (e.value.key, e.value.allowed) == ("sec.q", "a, b")
    assert vector(0.5, "v", 3) == (0.5, 0.5, 0.5)
    with pytest.raises(InvalidValue, match="needs 2 numbers, got 3"):
        vector([1, 2, 3], "v", 2)


def test_defaults_are_read_from_the_dataclass():
    @dataclass(frozen=True)
    class Example:
        required: int
        plain: float = 1.5
        made: tuple = field(default_factory=lambda: (1, 2))

    d = defaults(Example)
    assert (d.plain, d.made) == (1.5, (1, 2)) and not hasattr(d, "required")
    assert defaults(OptimizerSpec).noise_variance == 0.02
    # the parser's default is the dataclass's: an empty mapping parses to the dataclass default
    spec = parse_spec({"domain": BOX, "exploration": {"type": "adaptive"}})
    assert spec.exploration == ExplorationSpec("adaptive")
    assert spec.noise_variance == defaults(OptimizerSpec).noise_variance
