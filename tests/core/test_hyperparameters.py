"""MAP lengthscales: the objective's gradient against finite differences, the MAP against the data
that generated it, and exact state round trips when the strategy refits online."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from tvbod.core import SpecError, make_strategy, parse_spec
from tvbod.core.hyperparameters import (GammaPrior, converged, fit_hyperparameters,
                                       log_posterior)
from tvbod.core.kernels import ForgettingFactor, Matern52, SquaredExponential, WienerDrift

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
    fitted = fit_hyperparameters(SquaredExponential([2.0, 2.0]), X, y, 0.0025, weak, (0.05, 50.0),
                              np.random.default_rng(0), restarts=2).lengthscales
    np.testing.assert_allclose(fitted, [1.0, 4.0], rtol=0.35)


def test_without_data_the_map_is_the_prior_mode_within_bounds():
    fitted = fit_hyperparameters(SquaredExponential([1.0]), np.empty((0, 1)), np.empty(0), 0.02,
                              PRIOR, (0.01, 3.0), np.random.default_rng(0)).lengthscales
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
    ({"hyperparameters": {"lengthscales": "map", "refit_tolerance": -0.1}},
     "hyperparameters.refit_tolerance"),
    ({"hyperparameters": {"lengthscales": "map", "refit_tolerance": "tiny"}},
     "hyperparameters.refit_tolerance"),
    ({"hyperparameters": {"lengthscales": "map", "objective": "cholesky"}},
     "hyperparameters.objective"),
    ({"hyperparameters": {"refit_tolerance": 0.1}}, "hyperparameters.refit_tolerance"),
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


# ---------------------------------------------------------------------- the factored objective
def _dense_log_posterior(kernel, X, y, nv, prior, tK, learn_v, learn_n):
    """The textbook computation: K from the kernel itself, np.linalg.inv, slogdet and the full
    dK/d theta matrices (RW2006 eqs. 2.30 and 5.9), dimension by dimension."""
    n, ls = len(y), kernel.lengthscales
    Kf = kernel(X, X) * (1.0 if tK is None else tK)
    K = Kf + nv * np.eye(n)
    Kinv = np.linalg.inv(K)
    alpha = Kinv @ y
    value = -0.5 * y @ alpha - 0.5 * np.linalg.slogdet(K)[1] - 0.5 * n * np.log(2 * np.pi)
    W = np.outer(alpha, alpha) - Kinv
    r = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2 / ls**2).sum(-1))
    if isinstance(kernel, Matern52):  # dK/d log l_i = radial * (delta_i / l_i)^2
        radial = (5.0 / 3.0) * kernel.variance * (1 + np.sqrt(5) * r) * np.exp(-np.sqrt(5) * r)
    else:
        radial = kernel.variance * np.exp(-0.5 * r**2)
    radial = radial * (1.0 if tK is None else tK)
    grad = [0.5 * np.trace(W @ (radial * (X[:, None, i] - X[None, :, i]) ** 2 / ls[i] ** 2))
            for i in range(len(ls))]
    grad = np.array(grad) + prior.dlog_pdf_dlog_l(ls)
    extra = ([0.5 * np.trace(W @ Kf)] if learn_v else []) + ([0.5 * nv * np.trace(W)] if learn_n else [])
    return value + prior.log_pdf(ls), np.concatenate([grad, extra])


TEMPORAL = {"static": None, "forgetting": ForgettingFactor(0.05), "drift": WienerDrift(0.03)}


@pytest.mark.parametrize("kernel", [SquaredExponential([0.7, 1.3, 2.0], 1.7),
                                    Matern52([0.9, 0.5, 1.5], 0.6)], ids=["se", "m52"])
@pytest.mark.parametrize("temporal", list(TEMPORAL), ids=list(TEMPORAL))
@pytest.mark.parametrize("learn", [(False, False), (True, True), (True, False)],
                         ids=["ls", "ls+variances", "ls+signal"])
def test_factored_objective_matches_the_dense_textbook_computation(kernel, temporal, learn):
    rng = np.random.default_rng(3)
    X = rng.random((40, 3)) * 3
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(40)
    tK = None if TEMPORAL[temporal] is None else TEMPORAL[temporal](np.arange(40.0), np.arange(40.0))
    value, grad = log_posterior(kernel, X, y, 0.05, PRIOR, tK, *learn)
    ref_value, ref_grad = _dense_log_posterior(kernel, X, y, 0.05, PRIOR, tK, *learn)
    assert value == pytest.approx(ref_value, rel=1e-10, abs=1e-9)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-8)
    old_value, old_grad = log_posterior(kernel, X, y, 0.05, PRIOR, tK, *learn,
                                        objective="explicit-inverse")
    assert value == pytest.approx(old_value, rel=1e-12)
    np.testing.assert_allclose(grad, old_grad, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("kernel", [SquaredExponential([0.7, 1.3], 1.7), Matern52([0.9, 0.5], 0.6)],
                         ids=["se", "m52"])
def test_factored_gradient_under_the_drift_kernel_matches_finite_differences(kernel):
    rng = np.random.default_rng(4)
    X = rng.random((25, 2)) * 3
    y = 1.5 * np.sin(X).sum(1) + 0.2 * rng.standard_normal(25)
    tK = WienerDrift(0.03)(np.arange(25.0), np.arange(25.0))

    def value(u):
        k = type(kernel)(np.exp(u[:2]), np.exp(u[2]))
        return log_posterior(k, X, y, np.exp(u[3]), PRIOR, tK, True, True)[0]

    u0 = np.concatenate([np.log(kernel.lengthscales), [np.log(kernel.variance), np.log(0.05)]])
    _, grad = log_posterior(kernel, X, y, 0.05, PRIOR, tK, True, True)
    np.testing.assert_allclose(grad, approx_fprime(u0, value, 1e-6), rtol=1e-4, atol=1e-5)


def test_a_kernel_that_will_not_factor_gives_minus_infinity():
    X = np.zeros((3, 1))  # three identical points and no noise: K is singular
    value, grad = log_posterior(SquaredExponential([1.0]), X, np.ones(3), 0.0, PRIOR)
    assert value == -np.inf and np.array_equal(grad, [0.0])


# ---------------------------------------------------------------------- the refit-skip rule
def _data(n=60, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2)) * 6
    return X, np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)


def test_converged_is_the_projected_gradient_test():
    lo, hi = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    u = np.array([0.5, 1.0])  # the second coordinate sits on its upper bound
    assert converged(np.array([0.01, 5.0]), u, lo, hi, 0.05)  # pushing outward counts as zero
    assert not converged(np.array([0.01, -0.2]), u, lo, hi, 0.05)  # pulling inward does not
    assert not converged(np.array([0.06, 0.0]), u, lo, hi, 0.05)


def test_refit_at_the_map_is_skipped_and_keeps_the_values_exactly():
    X, y = _data()
    bounds = (0.05, 20.0)
    tight = fit_hyperparameters(SquaredExponential([1.0, 1.0]), X, y, 0.01, PRIOR, bounds,
                             np.random.default_rng(0), maxiter=500).lengthscales
    kernel = SquaredExponential(tight)
    lo, hi = np.log(bounds)
    _, grad = log_posterior(kernel, X, y, 0.01, PRIOR)
    assert converged(grad, np.log(tight), lo, hi, 0.05)  # the premise: the MAP's gradient is tiny
    fit = fit_hyperparameters(kernel, X, y, 0.01, PRIOR, bounds, np.random.default_rng(0),
                              tolerance=0.05)
    assert fit.skipped
    np.testing.assert_array_equal(fit.lengthscales, tight)  # bit for bit: no exp(log(l))
    again = fit_hyperparameters(kernel, X, y, 0.01, PRIOR, bounds, np.random.default_rng(0),
                                tolerance=0.0)
    assert not again.skipped  # tolerance 0: always refit


def test_refit_away_from_the_map_is_not_skipped_and_moves():
    X, y = _data()
    kernel = SquaredExponential([8.0, 0.1])  # far from what the data say
    _, grad = log_posterior(kernel, X, y, 0.01, PRIOR)
    assert np.max(np.abs(grad)) > 1.0  # the premise
    fit = fit_hyperparameters(kernel, X, y, 0.01, PRIOR, (0.05, 20.0), np.random.default_rng(0),
                              tolerance=0.05)
    assert not fit.skipped
    assert np.max(np.abs(np.log(fit.lengthscales / kernel.lengthscales))) > 0.5


def test_skipped_refit_still_runs_the_prior_draws_and_keeps_the_better():
    X, y = _data()
    bounds = (0.05, 20.0)
    tight = fit_hyperparameters(SquaredExponential([1.0, 1.0]), X, y, 0.01, PRIOR, bounds,
                             np.random.default_rng(0), maxiter=500).lengthscales
    runs = [fit_hyperparameters(SquaredExponential(tight), X, y, 0.01, PRIOR, bounds,
                                np.random.default_rng(7), restarts=2, tolerance=0.05)
            for _ in range(2)]
    assert runs[0].skipped and runs[1].skipped
    np.testing.assert_array_equal(runs[0].lengthscales, runs[1].lengthscales)  # deterministic
    best = lambda ls: log_posterior(SquaredExponential(ls), X, y, 0.01, PRIOR)[0]  # noqa: E731
    assert best(runs[0].lengthscales) >= best(tight)


def test_warm_start_outside_the_bounds_is_never_skipped():
    X, y = _data()
    fit = fit_hyperparameters(SquaredExponential([50.0, 50.0]), X, y, 0.01, PRIOR, (0.05, 20.0),
                              np.random.default_rng(0), tolerance=1e3)
    assert not fit.skipped and np.all(fit.lengthscales <= 20.0 + 1e-9)


def test_online_refits_are_skipped_once_the_map_settles_and_never_with_tolerance_zero():
    # A skipped refit keeps the lengthscales bit for bit; L-BFGS-B's own run (from exp(log l))
    # practically always moves them at least by round-off.
    def unchanged_steps(tolerance):
        s = make_strategy(parse_spec({"domain": BOX, "kernel": {"lengthscales": 4.5}, "seed": 2,
                                      "hyperparameters": {"lengthscales": "map"},
                                      "budget": {"candidates": 128, "starts": 2, "maxiter": 15}},
                                     {"hyperparameters.refit_tolerance": tolerance}))
        f = lambda x: float(np.sin(x[0] * 3) + np.cos(x[1]))  # noqa: E731
        same = []
        for _ in range(40):
            before = s.lengthscales
            x = s.ask()
            s.tell(x, f(x))
            same.append(np.array_equal(before, s.lengthscales))
        return sum(same[20:])

    assert unchanged_steps(0.05) >= 10 > unchanged_steps(0.0)


def test_spec_names_every_objective_the_fit_knows():
    from tvbod.core import hyperparameters, spec_model

    assert set(spec_model.OBJECTIVES) == set(hyperparameters.OBJECTIVES)
    assert spec_model.HyperSpec().objective == "factored"


MAP = {"domain": BOX, "hyperparameters": {"lengthscales": "map"}}


def test_a_stored_mapping_without_the_refit_keys_means_tvbod_0_2s_refit():
    from tvbod.core.behaviours import read_stored, spelled
    from tvbod.core.spec import parse_spec
    from tvbod.core.spec_model import HyperSpec

    stored = spelled(read_stored(MAP))["hyperparameters"]
    assert (stored["objective"], stored["refit_tolerance"]) == ("explicit-inverse", 0.0)
    fresh = spelled(MAP)["hyperparameters"]
    assert (fresh["objective"], fresh["refit_tolerance"]) == (HyperSpec.objective,
                                                              HyperSpec.refit_tolerance)
    hyper = parse_spec(read_stored(MAP)).hyper
    assert (hyper.objective, hyper.refit_tolerance) == ("explicit-inverse", 0.0)
    today = spelled(MAP)  # as the code before behaviour versions stored it
    assert spelled(read_stored(today)) == today
    assert MAP["hyperparameters"] == {"lengthscales": "map"}  # the argument is left alone
    assert "hyperparameters" not in spelled({"domain": BOX})
    for key, bad in (("refit_tolerance", -0.1), ("refit_tolerance", "tiny"),
                     ("objective", "cholesky")):
        with pytest.raises(SpecError) as err:
            parse_spec(MAP, {f"hyperparameters.{key}": bad})
        assert err.value.key == f"hyperparameters.{key}"


def test_a_stored_mapping_without_refit_stop_means_scipys_stopping_test():
    from tvbod.core.behaviours import read_stored, spelled
    from tvbod.core.spec import parse_spec
    from tvbod.core.spec_model import HyperSpec

    assert HyperSpec.refit_stop == "tolerance"
    assert spelled(read_stored(MAP))["hyperparameters"]["refit_stop"] == "scipy"
    assert spelled(MAP)["hyperparameters"]["refit_stop"] == "tolerance"
    assert parse_spec(read_stored(MAP)).hyper.refit_stop == "scipy"
    with pytest.raises(SpecError) as err:
        parse_spec(MAP, {"hyperparameters.refit_stop": "early"})
    assert err.value.key == "hyperparameters.refit_stop"


def _far_from_the_map():
    rng = np.random.default_rng(5)
    X = rng.random((40, 2))
    y = np.sin(4 * X[:, 0]) + np.cos(3 * X[:, 1]) + 0.05 * rng.standard_normal(40)
    return SquaredExponential([1.5, 1.5]), X, y


def _fit_counting(stop: bool, tolerance: float):
    import tvbod.core.hyperparameters as hp

    kernel, X, y = _far_from_the_map()
    calls = []
    objective = hp.LogPosterior(SquaredExponential, X, y, PRIOR)

    def counted(ls, v, nv):
        calls.append(ls.copy())
        return objective(ls, v, nv)

    negative_log_post = hp.OBJECTIVES["factored"]
    hp.OBJECTIVES["factored"] = lambda *a, **k: counted
    try:
        fit = fit_hyperparameters(kernel, X, y, 0.01, PRIOR, (0.01, 100.0),
                                  np.random.default_rng(0), tolerance=tolerance,
                                  stop_at_tolerance=stop)
    finally:
        hp.OBJECTIVES["factored"] = negative_log_post
    grad = objective(fit.lengthscales, 1.0, 0.01)[1]
    u, lo, hi = np.log(fit.lengthscales), np.log([0.01] * 2), np.log([100.0] * 2)
    return fit, len(calls), float(np.max(np.abs(np.clip(u + grad, lo, hi) - u)))


@pytest.mark.parametrize("tolerance", [0.05, 0.5])
def test_a_refit_that_stops_at_the_tolerance_ends_where_the_next_refit_would_be_skipped(tolerance):
    # L-BFGS-B's `gtol` is the same projected gradient as the skip test (`converged`): the stopped
    # fit would be skipped by the next refit, and it needs fewer evaluations than SciPy's 1e-5
    stopped, n_stopped, pg = _fit_counting(True, tolerance)
    assert pg <= tolerance
    assert converged(_ascent_gradient(stopped), np.log(stopped.lengthscales), np.log([0.01] * 2),
                     np.log([100.0] * 2), tolerance)
    full, n_full, pg_full = _fit_counting(False, tolerance)
    assert pg_full <= 1e-3 < tolerance and n_stopped < n_full
    # both maximize the same log posterior: the stopped fit is within its tolerance's reach
    kernel, X, y = _far_from_the_map()
    value = lambda ls: log_posterior(kernel.with_lengthscales(ls), X, y, 0.01, PRIOR)[0]
    assert value(full.lengthscales) - tolerance <= value(stopped.lengthscales) <= value(
        full.lengthscales) + 1e-9


def _ascent_gradient(fit):
    kernel, X, y = _far_from_the_map()
    return log_posterior(kernel.with_lengthscales(fit.lengthscales), X, y, 0.01, PRIOR)[1]
