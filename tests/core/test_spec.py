"""Bad specs are rejected with one error type naming the offending key and the allowed values."""

import numpy as np
import pytest

from tvbod.core import SpecError, make_strategy, parse_spec

BOX = {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 1.0]}


@pytest.mark.parametrize("spec, key", [
    ({}, "domain"),
    ({"domain": BOX, "strategy": "bogus"}, "strategy"),
    ({"domain": BOX, "colour": 1}, "colour"),
    ({"domain": BOX, "sense": "up"}, "sense"),
    ({"domain": {"type": "box", "lower": [0, 0], "upper": [1]}}, "domain.upper"),
    ({"domain": {"type": "box", "lower": [0, 2], "upper": [1, 1]}}, "domain.upper[1]"),
    ({"domain": {"type": "box", "lower": [0], "upper": [1], "scaling": [0]}}, "domain.scaling[0]"),
    ({"domain": {"type": "box", "lower": [0], "upper": ["a"]}}, "domain.upper[0]"),
    ({"domain": {"type": "cube"}}, "domain.type"),
    ({"domain": {"type": "points", "points": [[0, 1], [2]]}}, "domain.points"),
    ({"domain": {"type": "arms", "n_arms": 0}}, "domain.n_arms"),
    ({"domain": {"type": "arms", "n_arms": 2}, "kernel": {"type": "se"}}, "kernel.type"),
    ({"domain": {"type": "arms", "n_arms": 2}, "kernel": {"matrix": [[1, 0], [0, 1], [0, 0]]}}, "kernel.matrix"),
    ({"domain": {"type": "arms", "n_arms": 2}, "kernel": {"matrix": [[1, 2], [2, 1]]}}, "kernel.matrix"),
    ({"domain": {"type": "arms", "n_arms": 2}, "kernel": {"matrix": [[1, 0.5], [0.2, 1]]}}, "kernel.matrix"),
    ({"domain": BOX, "kernel": {"type": "matrix", "matrix": [[1]]}}, "kernel.type"),
    ({"domain": BOX, "kernel": {"lengthscales": [0.1, 0.2, 0.3]}}, "kernel.lengthscales"),
    ({"domain": BOX, "kernel": {"lengthscales": [0.1, -1]}}, "kernel.lengthscales[1]"),
    ({"domain": BOX, "kernel": {"variance": 0}}, "kernel.variance"),
    ({"domain": BOX, "noise_variance": 0}, "noise_variance"),
    ({"domain": BOX, "noise_variance": float("nan")}, "noise_variance"),
    ({"domain": BOX, "noise_variance": True}, "noise_variance"),
    ({"domain": BOX, "delta_b": 1.0}, "delta_b"),
    ({"domain": BOX, "beta": {"c2": 0.5}}, "beta.c2"),
    ({"domain": BOX, "beta": {"c3": 1}}, "beta.c3"),
    ({"domain": BOX, "strategy": "r-gp-ucb"}, "reset_period"),
    ({"domain": BOX, "strategy": "r-gp-ucb", "reset_period": 0}, "reset_period"),
    ({"domain": BOX, "strategy": "r-gp-ucb", "reset_period": 2.5}, "reset_period"),
    ({"domain": BOX, "reset_period": 5}, "reset_period"),
    ({"domain": BOX, "strategy": "tv-gp-ucb", "forgetting": 1.0}, "forgetting"),
    ({"domain": BOX, "strategy": "ui-tvbo"}, "drift_variance"),
    ({"domain": BOX, "measurement": {"scale": -1}}, "measurement.scale"),
    ({"domain": BOX, "budget": {"starts": 0}}, "budget.starts"),
    ({"domain": BOX, "budget": {"polish": "bfgs"}}, "budget.polish"),
    ({"domain": BOX, "seed": -1}, "seed"),
    ("not a mapping", "optimizer"),
])
def test_bad_spec_is_rejected_naming_the_key(spec, key):
    with pytest.raises(SpecError) as err:
        make_strategy(spec)
    assert err.value.key == key
    assert str(err.value).startswith(key)


def test_error_lists_allowed_values():
    with pytest.raises(SpecError) as err:
        parse_spec({"domain": BOX, "strategy": "bogus"})
    assert "et-gp-ucb" in err.value.allowed and "tv-gp-ucb" in err.value.allowed


def test_budget_tolerance_is_the_behaviour_versions_new_and_legacy_for_a_stored_mapping():
    from tvbod.core.behaviours import LEGACY_TOLERANCE, read_stored, spelled
    from tvbod.core.optimize import TOLERANCE

    assert parse_spec({"domain": BOX}).tolerance == TOLERANCE == 1e-5
    assert spelled({"domain": BOX})["budget"] == {"tolerance": TOLERANCE}
    # a stored mapping without the key was written when each polish stopped at its own rule
    for polish, legacy in LEGACY_TOLERANCE.items():
        stored = read_stored({"domain": BOX, "budget": {"polish": polish}})
        assert spelled(stored)["budget"] == {"polish": polish, "tolerance": legacy}
        assert parse_spec(stored).tolerance == legacy
    assert LEGACY_TOLERANCE["lbfgsb-joint"] == 1e7 * np.finfo(float).eps  # SciPy's default ftol
    with pytest.raises(SpecError, match="fixed by the behaviour version") as err:
        parse_spec({"domain": BOX, "budget": {"tolerance": 1e-3}})
    assert err.value.key == "budget.tolerance"
    arms = {"domain": {"type": "arms", "n_arms": 3}}
    assert "budget" not in spelled(arms)  # no polish on a finite domain
    assert parse_spec({"domain": BOX}, {"budget.tolerance": 1e-3}).tolerance == 1e-3
    for bad in (-1e-6, 0.5, "tight", True):
        with pytest.raises(SpecError) as err:
            parse_spec({"domain": BOX}, {"budget.tolerance": bad})
        assert err.value.key == "budget.tolerance"


def test_defaults_follow_the_paper_synthetic_setting():
    spec = parse_spec({"domain": BOX})
    assert (spec.strategy, spec.beta_c1, spec.beta_c2, spec.delta_b) == ("et-gp-ucb", 0.4, 4.0, 0.1)
    assert spec.kernel.lengthscales == (0.2, 0.2)


def test_spec_is_frozen():
    spec = parse_spec({"domain": BOX})
    with pytest.raises(AttributeError):
        spec.seed = 3


def test_budget_polish_defaults_to_lbfgsb_and_newton_is_opt_in():
    from tvbod.core.behaviours import read_stored, spelled

    assert parse_spec({"domain": BOX}).polish == "lbfgsb-joint"
    assert parse_spec({"domain": BOX, "budget": {"polish": "newton"}}).polish == "newton"
    assert make_strategy({"domain": BOX, "budget": {"polish": "newton"}}).budget.polish == "newton"
    # the default polish is the one every stored state was written with: nothing to spell out
    assert "polish" not in spelled(read_stored({"domain": BOX}))["budget"]
    with pytest.raises(SpecError) as err:
        parse_spec({"domain": BOX, "budget": {"polish": "bfgs"}})
    assert "newton" in err.value.allowed and "lbfgsb-joint" in err.value.allowed
