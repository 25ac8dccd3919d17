"""MAP lengthscales: the objective's gradient against finite differences, the MAP against the data
that generated it, and exact state round trips when the strategy refits online."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from tvbod.core import SpecError, make_strategy
from tvbod.core.hyperparameters import GammaPrior, fit_lengthscales, log_posterior
from tvbod.core.kernels import ForgettingFactor, Matern52, SquaredExponential

PRIOR = GammaPrior(15.0, 10.0 / 3.0)


@pytest.mark.parametrize("kernel", [SquaredExponential([0.7, 1.3]), Matern52([0.9, 0.5])],
                         ids=["se", "m52"])
@pytest.mark.parametrize("temporal", [None, ForgettingFactor(0.05)], ids=["static", "forgetting"])
def test_log_posterior_gradient_matches_finite_differences(kernel, temporal):
    rng = np.random.default_rng(0)
    X = rng.random((20, 2)) * 3
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(20)
    tK = None if temporal is None else temporal(np.arange(20.0), np.arange(20.0))

    def value(u):
        return log_posterior(kernel.with_lengthscales(np.exp(u)), X, y, 0.05, PRIOR, tK)[0]

    u0 = np.log(kernel.lengthscales)
    _, grad = log_posterior(kernel, X, y, 0.05, PRIOR, tK)
    np.testing.assert_allclose(grad, approx_fprime(u0, value, 1e-6), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", [SquaredExponential([0.7, 1.3], 1.7), Matern52([0.9, 0.5], 0.6)],
                         ids=["se", "m52"])
def test_log_posterior_gradient_in_signal_and_noise_variance_matches_finite_differences(kernel):
    # theta = (log l_1, log l_2, log sigma_f^2, log sigma_n^2), flat priors on the last two
    rng = np.random.default_rng(1)
    X = rng.random((20, 2)) * 3
    y = 1.5 * np.sin(X).sum(1) + 0.2 * rng.standard_normal(20)
    tK = ForgettingFactor(0.05)(np.arange(20.0), np.arange(20.0))

    def value(u):
        k = type(kernel)(np.exp(u[:2]), np.exp(u[2]))
        return log_posterior(k, X, y, np.exp(u[3]), PRIOR, tK, True, True)[0]

    u0 = np.concatenate([np.log(kernel.lengthscales), [np.log(kernel.variance), np.log(0.05)]])
    _, grad = log_posterior(kernel, X, y, 0.05, PRIOR, tK, True, True)
    assert grad.shape == (4,)
    np.testing.assert_allclose(grad, approx_fprime(u0, value, 1e-6), rtol=1e-4, atol=1e-5)


def test_fitted_variances_recover_the_scale_and_noise_that_generated_the_data():
    from tvbod.core.hyperparameters import fit_hyperparameters

    rng = np.random.default_rng(2)
    X = rng.random((120, 1)) * 10
    K = SquaredExponential([1.0], 4.0)(X, X)
    y = np.linalg.cholesky(K + 1e-9 * np.eye(120)) @ rng.standard_normal(120)
    y = y + rng.normal(0, np.sqrt(0.01), 120)
    fit = fit_hyperparameters(SquaredExponential([1.0], 1.0), X, y, 0.1, GammaPrior(2.0, 2.0),
                              (0.1, 10.0), rng, variance_bounds=(1e-3, 1e3),
                              noise_bounds=(1e-6, 1.0), fixed_lengthscales=True)
    np.testing.assert_array_equal(fit.lengthscales, [1.0])
    assert 1.5 < fit.variance < 10.0 and 0.003 < fit.noise_variance < 0.03


def test_gamma_prior_log_pdf_matches_scipy():
    from scipy.stats import gamma

    l = np.array([0.5, 4.0, 9.0])
    assert PRIOR.log_pdf(l) == pytest.approx(gamma.logpdf(l, 15.0, scale=3.0 / 10.0).sum(), rel=1e-12)
    assert PRIOR.mode == pytest.approx(14 * 3 / 10)


def test_map_recovers_the_lengthscale_that_generated_the_data():
    rng = np.random.default_rng(1)
    X = rng.random((150, 2)) * 10
    true = SquaredExponential([1.0, 4.0])
    K = true(X, X) + 1e-8 * np.eye(150)
    y = np.linalg.cholesky(K) @ rng.standard_normal(150) + 0.05 * rng.standard_normal(150)
    weak = GammaPrior(1.1, 0.01)  # nearly flat: the data decide
    fitted = fit_lengthscales(SquaredExponential([2.0, 2.0]), X, y, 0.0025, weak, (0.05, 50.0),
                              np.random.default_rng(0), restarts=2)
    np.testing.assert_allclose(fitted, [1.0, 4.0], rtol=0.35)


def test_without_data_the_map_is_the_prior_mode_within_bounds():
    fitted = fit_lengthscales(SquaredExponential([1.0]), np.empty((0, 1)), np.empty(0), 0.02,
                              PRIOR, (0.01, 3.0), np.random.default_rng(0))
    np.testing.assert_allclose(fitted, [3.0])


BOX = {"type": "box", "lower": [-3.0, -6.0], "upper": [-2.0, -4.0], "scaling": [0.125, 0.25]}
HYPER = {"lengthscales": "map", "refit_every": 2, "restarts": 1, "maxiter": 20}


@pytest.mark.parametrize("strategy", [{"strategy": "et-gp-ucb"}, {"strategy": "tv-gp-ucb", "forgetting": 0.03},
                                      {"strategy": "ui-tvbo", "drift_variance": 0.03}],
                         ids=["et", "tv", "ui"])
def test_online_map_strategy_round_trips_exactly(strategy):
    spec = {**strategy, "domain": BOX, "kernel": {"lengthscales": 4.5}, "hyperparameters": HYPER,
            "seed": 4, "budget": {"candidates": 128, "starts": 2, "maxiter": 15}}
    live = make_strategy(spec)
    f = lambda x: float(np.sin(x[0] * 3) + np.cos(x[1]))  # noqa: E731
    for _ in range(15):
        x = live.ask()
        live.tell(x, f(x))
    assert not np.allclose(live.lengthscales, 4.5), "the refit should move the lengthscales"
    clone = make_strategy(spec)
    clone.load_state_dict(live.state_dict())
    np.testing.assert_array_equal(clone.lengthscales, live.lengthscales)
    for _ in range(5):
        a, b = live.ask(), clone.ask()
        np.testing.assert_array_equal(a, b)
        assert live.tell(a, f(a)) == clone.tell(b, f(b))
    np.testing.assert_array_equal(clone.gp.L_, live.gp.L_)


def test_map_on_a_points_domain_rebuilds_the_gram_matrix():
    grid = np.linspace(0, 5, 30)[:, None]
    s = make_strategy({"domain": {"type": "points", "points": grid.tolist()},
                       "hyperparameters": {"lengthscales": "map", "prior": {"shape": 2, "rate": 1}},
                       "kernel": {"lengthscales": 0.2}, "seed": 0})
    for _ in range(12):
        x = s.ask()
        s.tell(x, float(np.sin(x[0])))
    ls = s.lengthscales[0]
    assert ls > 0.3  # a smooth function: the MAP moves far from 0.2
    expected = SquaredExponential([ls])(grid, grid)
    np.testing.assert_allclose(s.gp.kernel.matrix, expected)


@pytest.mark.parametrize("spec, key", [
    ({"hyperparameters": {"lengthscales": "guess"}}, "hyperparameters.lengthscales"),
    ({"hyperparameters": {"refit_every": 2}}, "hyperparameters.refit_every"),
    ({"hyperparameters": {"lengthscales": "map", "bounds": [1.0, 0.5]}}, "hyperparameters.bounds[1]"),
    ({"hyperparameters": {"lengthscales": "map", "prior": {"shape": 0}}}, "hyperparameters.prior.shape"),
])
def test_bad_hyperparameter_specs_name_the_key(spec, key):
    with pytest.raises(SpecError) as err:
        make_strategy({"domain": BOX, **spec})
    assert err.value.key == key


def test_matrix_kernel_has_no_lengthscales_to_fit():
    with pytest.raises(SpecError) as err:
        make_strategy({"domain": {"type": "arms", "n_arms": 2}, "kernel": {"matrix": [[1, 0], [0, 1]]},
                       "hyperparameters": {"lengthscales": "map"}})
    assert err.value.key == "hyperparameters.lengthscales"
