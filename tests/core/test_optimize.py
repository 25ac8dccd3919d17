"""The maximizers take any acquisition: one for the box, one for finite sets (with the tie rule)."""

import numpy as np
import pytest

from tvbod.core.acquisition import EI, UCB, PenalizedUCB, expected_improvement
from tvbod.core.gp import ExactGP
from tvbod.core.kernels import SquaredExponential
from tvbod.core.optimize import Budget, maximize_on_box, maximize_on_set, sobol_unit


def test_exact_ei_ties_on_a_finite_set_go_to_the_lowest_index():
    mean = np.array([0.0, 0.3, 0.1, 0.3, 0.3])
    var = np.array([0.5, 0.2, 0.2, 0.2, 0.2])
    ei = EI(best=0.2)
    scores = ei.score(mean, var)
    assert scores[1] == scores[3] == scores[4] and scores[0] < scores[1]  # an exact three-way tie
    assert maximize_on_set(mean, var, ei)[0] == 1
    assert maximize_on_set(mean[::-1].copy(), var[::-1].copy(), ei)[0] == 0


def test_penalized_ucb_on_a_set_scores_the_penalty_only_on_the_screened_best():
    mean = np.array([1.0, 0.9, 0.0, 0.8, 0.1, 0.7])
    var = np.full(6, 0.04)
    seen = []

    def complexity(points):
        seen.append(points[:, 0].copy())
        return np.where(points[:, 0] == 0.0, 100.0, 0.0)  # a large penalty on point 0

    i, value = maximize_on_set(mean, var, PenalizedUCB(1.0, 1.0, complexity), screen=3)
    assert [list(p) for p in seen] == [[0.0, 1.0, 3.0]]  # the three best by the smooth UCB, sorted
    assert i == 1 and value == pytest.approx(0.9 + 0.2)
    assert maximize_on_set(mean, var, UCB(1.0))[0] == 0  # without the penalty point 0 wins


@pytest.mark.parametrize("acq", [UCB(2.0), EI(best=0.6, xi=0.01)], ids=["ucb", "ei"])
def test_box_maximizer_reaches_the_dense_grid_maximum_of_any_acquisition(acq):
    gp = ExactGP(SquaredExponential([0.15]), 0.01)
    for x in (0.1, 0.35, 0.5, 0.9):
        gp.append(np.array([x]), float(np.sin(6 * x)), 0.0)
    lo, hi = np.zeros(1), np.ones(1)
    z, value = maximize_on_box(gp, 0.0, acq, lo, hi, sobol_unit(1, 64, 0), np.zeros(1),
                               Budget(64, 4, 50))
    grid = np.linspace(0, 1, 20001)[:, None]
    dense = acq.score(*gp.predict(grid, 0.0))
    assert lo[0] <= z[0] <= hi[0]
    assert value >= dense.max() - 1e-9
    assert value == pytest.approx(float(acq.score(*gp.predict(z[None, :], 0.0))[0]), rel=1e-12)


def test_ei_value_object_is_the_ei_formula():
    m, v = np.array([0.1, 0.5]), np.array([0.04, 0.09])
    assert np.array_equal(EI(0.3, 0.01).score(m, v), expected_improvement(m, v, 0.3, 0.01))
