"""Safe tuning (`tvbod.core.safety`): the safe set against a direct computation, proposals only
from it, the step limit, the backup after a reset, failures, state and validation."""

import numpy as np
import pytest

from tvbod.core import make_strategy
from tvbod.core.errors import SpecError
from tvbod.core.gp import ExactGP
from tvbod.core.kernels import SquaredExponential

THRESHOLD = 1.5
SEED = [0.55, 0.5]


def cost(x, t: int = 1, jump_at: int | None = None) -> float:
    """A bowl whose rim (most of the unit square) costs more than `THRESHOLD`; after `jump_at`
    the bowl moves and rises."""
    cx, cy, lift = (0.7, 0.6, 0.0) if jump_at is None or t < jump_at else (0.45, 0.35, 0.3)
    return float(1.0 + lift + 6.0 * ((x[0] - cx) ** 2 + (x[1] - cy) ** 2))


def mapping(strategy: str = "et-gp-ucb", seed: int = 0, **safety) -> dict:
    extra = {"reset_period": 25} if strategy == "r-gp-ucb" else {}
    extra |= {"forgetting": 0.03} if strategy == "tv-gp-ucb" else {}
    extra |= {"drift_variance": 0.03} if strategy == "ui-tvbo" else {}
    return {"strategy": strategy, "sense": "minimize", "seed": seed,
            "domain": {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 1.0]},
            "kernel": {"type": "se", "lengthscales": 0.2}, "noise_variance": 0.01,
            "budget": {"candidates": 256, "starts": 2, "maxiter": 20},
            "safety": {"max_cost": THRESHOLD, "safe_seeds": [SEED], **safety}, **extra}


def run(m: dict, steps: int, jump_at: int | None = None, check=None):
    s = make_strategy(m)
    rng = np.random.default_rng(m["seed"] + 100)
    results = []
    for t in range(1, steps + 1):
        x = s.ask()
        if check is not None:
            check(s, x)
        results.append((x, s.tell(x, cost(x, t, jump_at) + 0.02 * rng.standard_normal())))
    return s, results


def test_predict_with_a_constant_prior_mean_matches_a_direct_solve():
    rng = np.random.default_rng(0)
    X, y, Q = rng.random((7, 2)), rng.standard_normal(7), rng.random((5, 2))
    k = SquaredExponential(np.array([0.3, 0.3]), 1.0)
    gp = ExactGP(k, 0.05)
    gp.fit(X, y, np.zeros(7))
    K = k(X, X) + 0.05 * np.eye(7)
    for m in (0.0, -1.7, 3.0):
        direct = m + k(Q, X) @ np.linalg.solve(K, y - m)
        mean, var = gp.predict(Q, 0.0, prior_mean=m)
        np.testing.assert_allclose(mean, direct, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(var, 1.0 - np.einsum("ij,ji->i", k(Q, X),
                                                        np.linalg.solve(K, k(X, Q))), atol=1e-10)


def test_the_safe_set_equals_a_brute_force_computation_on_a_grid():
    s, _ = run(mapping(), 15)
    s.settle()
    g = np.linspace(0, 1, 41)
    Z = np.array([[a, b] for a in g for b in g])  # the unit box is the internal box
    h = s.output.to_internal(THRESHOLD)
    sf = np.sqrt(s.base_kernel.variance)
    r = max(1.0, abs(h) / sf)
    X, y = s.gp.X_, s.gp.y_
    k = s.base_kernel
    K = k(X, X) + (s.gp.noise_variance + s.gp.jitter_) * np.eye(len(y))
    kq = k(Z, X)
    mean = h + kq @ np.linalg.solve(K, y - h)
    sd = np.sqrt(np.maximum(sf ** 2 - np.einsum("ij,ji->i", kq, np.linalg.solve(K, kq.T)), 0))
    brute = mean - 2.0 * r * sd >= h
    got = s.safety.certified(s.gp, Z, s.t, s.output, sf)
    lower = s.safety.lower_bound(s.gp, Z, s.t, s.output, sf)
    near = np.abs(mean - 2.0 * r * sd - h) < 1e-8  # on the boundary round-off may decide
    assert np.array_equal(got[~near], brute[~near])
    np.testing.assert_allclose(lower, mean - 2.0 * r * sd, atol=1e-8)
    assert 0.0 < got.mean() < 1.0  # neither empty nor the whole box


@pytest.mark.parametrize("seed", range(8))
def test_no_proposal_leaves_the_safe_set_or_the_step_box(seed):
    step = np.array([0.15, 0.15])

    def check(s, x):
        z = s.domain.to_internal(x)
        if s.safety.backup is not None:
            assert np.array_equal(z, s.safety.backup)
            return
        if s.safety.reference is not None:
            assert np.all(np.abs(z - s.safety.reference) <= step + 1e-12)
        if s.gp.n == 0:
            return
        sf = s._sigma_f
        if not s.safety.admitted(s.gp, z[None, :], s.t, s.output, sf)[0]:
            lo, hi = s.safety.step_box(s.domain.z_lower, s.domain.z_upper)
            fallback = s.safety.fallback(s.gp, s.t, s.output, sf, lo, hi, s.gp.data_mean(s.t))
            assert np.array_equal(z, fallback)

    m = mapping(seed=seed, max_step=step.tolist(), sigmas=1.0 + 0.5 * seed)
    m["kernel"]["lengthscales"] = float(np.random.default_rng(seed).uniform(0.1, 0.4))
    s = make_strategy(m)
    objective = random_objective(seed)
    for _ in range(40):
        x = s.ask()
        check(s, x)
        s.tell(x, objective(x))


def random_objective(seed: int):
    """A random cost on the unit square: a bowl around a random centre plus random bumps, noisy."""
    rng = np.random.default_rng([seed, 7])
    centre, bumps, heights = rng.random(2), rng.random((4, 2)), rng.normal(0.0, 0.3, 4)

    def f(x):
        x = np.asarray(x)
        bump = heights @ np.exp(-((bumps - x) ** 2).sum(-1) / 0.02)
        return float(1.0 + 6.0 * ((x - centre) ** 2).sum() + bump + 0.02 * rng.standard_normal())
    return f


@pytest.mark.parametrize("strategy", ["et-gp-ucb", "gp-ucb", "r-gp-ucb", "tv-gp-ucb", "ui-tvbo"])
def test_every_gp_strategy_rarely_crosses_the_threshold_and_the_unsafe_one_often(strategy):
    unsafe_rate, safe_rate = [], []
    for seed in range(4):
        m = mapping(strategy, seed)
        _, safe = run(m, 40)
        safe_rate += [cost(x) > THRESHOLD for x, _ in safe]
        del m["safety"]
        _, free = run(m, 40)
        unsafe_rate += [cost(x) > THRESHOLD for x, _ in free]
    assert np.mean(safe_rate) <= 0.05, np.mean(safe_rate)
    assert np.mean(unsafe_rate) >= 2 * np.mean(safe_rate) + 0.05, np.mean(unsafe_rate)


def test_a_reset_falls_back_to_the_best_certified_point_of_the_old_dataset():
    for seed in range(4):
        s, results = run(mapping(seed=seed), 70, jump_at=40)
        resets = [i for i, (_, r) in enumerate(results) if r.reset]
        assert resets, "the jump at t = 40 was not caught"
        for i in resets:
            r = results[i][1]
            assert r.backup is not None
            if i + 1 < len(results):  # the next proposal is the backup
                np.testing.assert_allclose(results[i + 1][0], r.backup)


def test_a_failure_is_told_at_the_cap_and_shrinks_the_safe_set_around_it():
    m = mapping()
    m["trigger"] = {"refractory": 1000}  # no reset: the same dataset before and after
    s, _ = run(m, 12)
    x = s.ask()
    z = s.domain.to_internal(x)
    near = np.clip(z + 0.05 * np.array([[1, 0], [-1, 0], [0, 1], [0, -1]]), 0, 1)
    sf, t = s._sigma_f, s.t
    before = s.safety.lower_bound(s.gp, np.vstack([z, near]), t, s.output, sf)
    cap = s.measured(0.0, failed=True).told
    raw_before, fraction = list(s.output.raw_), s.safe_fraction()
    r = s.tell(x, float("nan"), failed=True)
    assert r.safety_violation and r.failed
    assert s.output.to_measurement(s.gp.y_[-1]) == pytest.approx(cap)
    assert cap > THRESHOLD
    assert s.output.raw_ == raw_before  # a failure does not calibrate the measurement map
    after = s.safety.lower_bound(s.gp, np.vstack([z, near]), t, s.output, sf)
    assert np.all(after < before)
    assert s.safe_fraction() < fraction
    assert (s.safety.violations, s.safety.failures) == (1, 1)


def test_a_catastrophic_measurement_is_a_violation_capped_in_the_model():
    s, _ = run(mapping(), 25)  # past the calibration: the scale is fixed
    x = s.ask()
    scale, cap = s.output.scale_, s.measured(1e4).told
    assert THRESHOLD < cap < 1e4 and s.measured(1.0).told == 1.0
    r = s.tell(x, 1e4)
    assert r.safety_violation and not r.failed
    assert s.output.to_measurement(s.gp.y_[-1]) == pytest.approx(cap)
    assert s.output.scale_ == scale


def test_state_round_trips_and_the_next_proposals_agree():
    m = mapping(max_step=[0.2, 0.2])
    a, _ = run(m, 30, jump_at=20)
    b = make_strategy(m)
    b.load_state_dict(a.state_dict())
    assert b.safety.state_dict() == a.safety.state_dict()
    for t in range(31, 41):
        xa, xb = a.ask(), b.ask()
        assert np.array_equal(xa, xb)
        y = cost(xa, t, 20)
        ra, rb = a.tell(xa, y), b.tell(xb, y)
        assert (ra.reset, ra.psi, ra.safe_fraction) == (rb.reset, rb.psi, rb.safe_fraction)


def test_the_first_proposal_is_the_seed_and_best_is_certified():
    from tvbod.core.recommend import recommend

    s = make_strategy(mapping())
    np.testing.assert_allclose(s.ask(), SEED)
    s, _ = run(mapping(), 20)
    rec = recommend(s)
    assert rec.certified
    assert s.safety.certified(s.gp, s.domain.to_internal(rec.x)[None, :], s.t, s.output,
                              s._sigma_f)[0]


@pytest.mark.parametrize("safety, key, says", [
    ({"min_reward": 1.0, "safe_seeds": [SEED]}, "safety.min_reward", "sense minimize"),
    ({"safe_seeds": [SEED]}, "safety.max_cost", "required"),
    ({"max_cost": 1.0}, "safety.safe_seeds", "required"),
    ({"max_cost": 1.0, "safe_seeds": [[2.0, 0.5]]}, "safety.safe_seeds[0]", "outside the box"),
    ({"max_cost": 1.0, "safe_seeds": [[0.5]]}, "safety.safe_seeds[0]", "needs 2 numbers"),
    ({"max_cost": 1.0, "safe_seeds": [SEED], "max_step": [0.1, -1]}, "safety.max_step[1]", "(0.0, 1.0]"),
    ({"max_cost": 1.0, "safe_seeds": [SEED], "max_step": [0.1, 3.0]}, "safety.max_step[1]", "(0.0, 1.0]"),
    ({"max_cost": 1.0, "safe_seeds": [SEED], "sigmas": 0}, "safety.sigmas", "(0.0, 10.0]"),
    ({"max_cost": 1.0, "safe_seeds": [SEED], "confidence": 0.9}, "safety.confidence", "unknown"),
])
def test_bad_safety_keys_are_named_with_the_allowed_range(safety, key, says):
    m = mapping()
    m["safety"] = safety
    with pytest.raises(SpecError) as exc:
        make_strategy(m)
    assert exc.value.key == key, str(exc.value)
    assert says in str(exc.value), str(exc.value)


def test_safety_needs_a_gp_strategy_and_a_box():
    m = mapping("random-search")
    with pytest.raises(SpecError, match="GP strategy"):
        make_strategy(m)
    m = mapping()
    m["domain"] = {"type": "arms", "n_arms": 3}
    m["kernel"] = {"type": "matrix", "matrix": np.eye(3).tolist()}
    with pytest.raises(SpecError, match="box domain"):
        make_strategy(m)
