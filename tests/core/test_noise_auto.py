"""`noise_variance: auto`: the noise variance estimated once, by marginal likelihood on the
measurements that calibrate an auto measurement map: the likelihood against a direct solve, the
estimate against the noise of GP samples, the moment it is taken, its state and its defaults."""

import numpy as np
import pytest

from tvbod.core import SpecError, make_strategy, parse_spec
from tvbod.core.grid_fits import NOISE_FLOOR, fit_noise, noise_log_likelihoods
from tvbod.core.behaviours import read_stored, spelled

BOX = {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 1.0]}


def _se(X, ls=0.2):
    d = (X[:, None, :] - X[None, :, :]) / ls
    return np.exp(-0.5 * np.sum(d**2, axis=-1))


def test_noise_log_likelihood_equals_a_direct_solve():
    rng = np.random.default_rng(0)
    X = rng.random((25, 2))
    K, y = _se(X), rng.standard_normal(25)
    grid = np.array([0.02, 0.1, 0.5, 1.0])
    got = noise_log_likelihoods(K, y, grid)
    for value, s in zip(got, grid):
        A = K + s * np.eye(25)
        direct = -0.5 * (y @ np.linalg.solve(A, y) + np.linalg.slogdet(A)[1])
        assert value == pytest.approx(direct, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("true_noise", [0.05, 0.3])
def test_the_estimate_recovers_the_noise_of_gp_samples(true_noise):
    estimates = []
    for seed in range(20):
        rng = np.random.default_rng([seed, 7])
        X = rng.random((120, 2))
        K = _se(X)
        f = np.linalg.cholesky(K + 1e-9 * np.eye(120)) @ rng.standard_normal(120)
        estimates.append(fit_noise(K, f + np.sqrt(true_noise) * rng.standard_normal(120)))
    assert np.median(estimates) == pytest.approx(true_noise, rel=0.3)


def test_the_estimate_keeps_the_floor_and_one_point_says_nothing():
    X = np.linspace(0, 1, 30)[:, None]
    smooth = np.sin(3 * X[:, 0])  # noise-free: the likelihood wants the smallest noise
    assert fit_noise(_se(X, 0.3), smooth) == NOISE_FLOOR
    assert fit_noise(np.ones((1, 1)), np.array([0.3])) == NOISE_FLOOR


def _spec(seed=0, **extra):
    return {"strategy": "et-gp-ucb", "sense": "minimize", "seed": seed, "domain": BOX,
            "budget": {"candidates": 64, "starts": 1, "maxiter": 5}, **extra}


def test_the_noise_is_estimated_when_calibration_ends_and_round_trips_with_the_state():
    # a plant whose first measurements are mostly noise: the estimate rises well above the floor
    s, rng = make_strategy(_spec()), np.random.default_rng(3)
    n0 = s.spec.n_calibration
    for t in range(1, n0 + 6):
        x = s.ask()
        s.tell(x, 0.1 * x[0] + rng.normal(0.0, 1.0))
        if t == n0 - 1:
            assert s.variances[1] == s.spec.noise_variance == NOISE_FLOOR  # still calibrating
    assert s.variances[1] > 0.3
    state = s.state_dict()
    twin = make_strategy(_spec())
    twin.load_state_dict(state)
    assert twin.variances[1] == s.variances[1]
    assert np.array_equal(twin.ask(), s.ask())


def test_auto_is_the_default_with_an_auto_map_and_refused_with_a_fixed_one():
    assert parse_spec(_spec()).learns_noise
    fixed = parse_spec(_spec(measurement={"offset": 0.0, "scale": 1.0}))
    assert not fixed.learns_noise and fixed.noise_variance == 0.02
    with pytest.raises(SpecError) as err:
        parse_spec(_spec(measurement={"offset": 0.0, "scale": 1.0}, noise_variance="auto"))
    assert err.value.key == "noise_variance"
    with pytest.raises(SpecError):
        parse_spec(_spec(noise_variance="auto", hyperparameters={
            "lengthscales": "map", "noise_variance": "map"}))
    assert spelled(_spec())["noise_variance"] == "auto"
    assert spelled(read_stored(_spec()))["noise_variance"] == 0.02
