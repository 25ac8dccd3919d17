"""A plant file that names only its parameters' bounds: `optimizer: {strategy: et-gp-ucb}` gets the
measurement map `auto` (inputs on the unit box, lengthscales relative to it) and tunes a new
user's plant without false resets, while a stored mapping without the key keeps the fixed map it
was written under."""

import numpy as np

from tvbod.core import make_strategy, parse_spec
from tvbod.core.behaviours import read_stored, spelled

BOX = {"type": "box", "lower": [0.0, 0.0], "upper": [2.0, 1.0]}


def _bounds_only(seed: int) -> dict:
    return {"strategy": "et-gp-ucb", "sense": "minimize", "seed": seed, "domain": BOX}


def _cost(x, t: int) -> float:
    """A PI loop's cost over the box (0 ... ~6), its optimum moving at t = 40."""
    kp, ki = (0.6, 0.3) if t < 40 else (1.4, 0.7)
    return float(2.0 * (x[0] - kp) ** 2 + 6.0 * (x[1] - ki) ** 2)


def test_a_new_plant_is_measured_on_its_own_scale_and_a_stored_one_on_the_fixed_map():
    new = parse_spec(_bounds_only(0))
    assert new.calibrates and new.measurement_offset is None and new.measurement_scale is None
    stored = read_stored({"strategy": "et-gp-ucb", "domain": BOX})
    assert spelled(stored)["measurement"] == {"offset": 0.0, "scale": 1.0}
    assert not parse_spec(stored).calibrates
    assert spelled(read_stored({"domain": BOX, "measurement": {"offset": 3.0}}))[
        "measurement"] == {"offset": 3.0, "scale": 1.0}
    # the box is the kernel's unit cube: lengthscales are shares of each parameter's range
    assert np.allclose(make_strategy(_bounds_only(0)).domain.to_internal([2.0, 1.0]), [1.0, 1.0])


def test_the_bounds_only_file_catches_a_moved_optimum_without_false_resets():
    # 10 seeds, T = 60: a reset before the move is a false one; caught: a reset at t = 40..45.
    caught, false_runs, most = 0, 0, 0
    for seed in range(10):
        s, noise = make_strategy(_bounds_only(seed)), np.random.default_rng([seed, 99])
        resets = []
        for t in range(1, 61):
            x = s.ask()
            if s.tell(x, _cost(x, t) + 0.05 * noise.standard_normal()).reset:
                resets.append(t)
        caught += any(40 <= r <= 45 for r in resets)
        false_runs += any(r < 40 for r in resets)
        most = max(most, len(resets))
    assert false_runs <= 1 and caught >= 8 and most <= 4, (false_runs, caught, most)
