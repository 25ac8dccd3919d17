"""The suite's TuneControl family (tvbod/bench/suite/tunecontrol.py, tc_cartpole.py, tc_tanks.py)
against the real `tunecontrol` package: the package's own costs, stored for fixed gains and
drifted parameters in tests/fixtures/tunecontrol_reference.json, and checked live where the
package is installed; then the drift mapping, the catastrophes and the best costs.

Regenerate the fixture where the package is importable (it needs torch and declares
Python >= 3.12; its source on PYTHONPATH works on 3.11):
    PYTHONPATH=/path/to/tunecontrol-src:. python tests/bench/test_suite_tunecontrol.py
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import qmc

from tvbod.bench.suite import plants as suite_plants
from tvbod.bench.suite import tc_cartpole as cp
from tvbod.bench.suite import tc_tanks as tk
from tvbod.bench.suite import tunecontrol as tc
from tvbod.bench.suite.plant import DRIFT_KINDS, Drift

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tunecontrol_reference.json"
DRIFT = Drift(at=10, second=20, ramp_steps=10, period=10)
#: (drift kind, step): the nominal plant and each parameter change at its full extent.
CASES = (("none", 0), ("jump-large", 15), ("jump-small", 15), ("two-jumps", 25),
         ("optimum-jump", 15))
REL = 1e-6


def drift(kind: str) -> Drift:
    return Drift(kind, at=DRIFT.at, second=DRIFT.second, ramp_steps=DRIFT.ramp_steps,
                 period=DRIFT.period)


def sobol(P, n: int, seed: int = 5) -> np.ndarray:
    return P.lower + qmc.Sobol(len(P.lower), scramble=True, seed=seed).random(n) * (
        P.upper - P.lower)


def corners(P) -> np.ndarray:
    return np.array(list(itertools.product(*zip(P.lower, P.upper))))


def reference_gains(P) -> np.ndarray:
    """20 nominal gain vectors (16 scrambled Sobol points and 4 box corners) and 2 per drifted
    parameter set: the cases of the fixture, in order."""
    X = sobol(P, 32, seed=7)
    return np.vstack([X[:16], corners(P)[:4], X[16:16 + 2 * (len(CASES) - 1)]])


def case_list(P):
    """`(kind, t, gains)` per fixture case of the plant `P`."""
    X = reference_gains(P)
    kinds = [CASES[0]] * 20 + [c for c in CASES[1:] for _ in range(2)]
    return [(k, t, x) for (k, t), x in zip(kinds, X)]


def package_cost(name: str, P, params, gains: np.ndarray) -> float:
    """The real package's noise-free cost of `gains` with the physical parameters `params`."""
    import torch
    import tunecontrol

    if name.startswith("tc-cartpole"):
        task = tunecontrol.make("cartpole", {"dim": P.dim, "objective": P.objective})
        task._sim._params.update(mass_pole=params.mass_pole, length_pole=params.length_pole,
                                 friction_coef=params.friction, K=params.actuator_gain,
                                 T1=params.T1)
    else:
        dyn = {"k1": params.k1, "k2": params.k2, "k3": params.k3, "k4": params.k4,
               "initial_state": tuple(params.initial)}
        task = tunecontrol.make("cascaded_tank", {"objective": P.objective, "dynamics": dyn,
                                                  "target": params.target})
    value, _ = task.evaluate(torch.tensor(np.asarray(gains, float), dtype=torch.float64))
    return float(value)


def ours(P, kind: str, t: int, gains) -> float:
    """Our implementation's value of the package's cost (no catastrophe floor)."""
    return float(P.raw(np.asarray(gains, float), P.params(t, drift(kind)))[0][0])


def write_fixture() -> None:
    import torch

    out = {"package": "tunecontrol 0.1.0", "torch": torch.__version__,
           "drift": {"at": DRIFT.at, "second": DRIFT.second},
           "cases": []}
    for name, make in tc.FAMILY.items():
        P = make()
        for kind, t, x in case_list(P):
            out["cases"].append({"plant": name, "drift": kind, "t": t, "gains": x.tolist(),
                                 "cost": package_cost(name, P, P.params(t, drift(kind)), x)})
    cases = ",\n".join(json.dumps(c) for c in out.pop("cases"))
    FIXTURE.write_text(json.dumps(out)[:-1] + ', "cases": [\n' + cases + "\n]}\n")


# ---------------------------------------------------------------------- the package's costs
def test_costs_match_the_packages_stored_reference_values_to_1e_6():
    ref = json.loads(FIXTURE.read_text())
    assert {c["plant"] for c in ref["cases"]} == set(tc.FAMILY)
    for case in ref["cases"]:
        P = tc.FAMILY[case["plant"]]()
        mine = ours(P, case["drift"], case["t"], case["gains"])
        assert mine == pytest.approx(case["cost"], rel=REL), case
    assert len(ref["cases"]) == 28 * len(tc.FAMILY)


def test_costs_match_the_installed_package_on_20_gain_vectors_per_task():
    pytest.importorskip("tunecontrol", reason="the real TuneControl package (torch, Python >= "
                        "3.12) is not installed; the stored reference values are checked instead")
    for name, make in tc.FAMILY.items():
        P = make()
        cases = case_list(P)
        assert sum(k == "none" for k, _, _ in cases) == 20
        for kind, t, x in cases:
            want = package_cost(name, P, P.params(t, drift(kind)), x)
            assert ours(P, kind, t, x) == pytest.approx(want, rel=REL), (name, kind, x)


# ---------------------------------------------------------------------- the suite's protocol
def test_family_plants_are_held_out_suite_plants_with_the_packages_boxes():
    assert set(tc.PLANTS) <= set(tc.FAMILY)
    assert set(tc.PLANTS) <= set(suite_plants.names())
    boxes = {2: cp.BOXES[2], 4: cp.BOXES[4]}
    for name in tc.PLANTS:
        P = suite_plants.plant(name)
        assert P.split == "held-out" and set(P.drifts) <= set(DRIFT_KINDS)
        assert len(P.names) == len(P.lower) == len(P.upper)
        box = boxes[P.dim] if name.startswith("tc-cartpole") else tk.BOX
        assert np.array_equal(np.array(box).T, np.vstack([P.lower, P.upper]))


def test_episode_is_the_noisy_cost_reproducible_from_its_generator():
    for name in ("tc-cartpole-2d-lqr", "tc-tank-sse"):
        P = tc.FAMILY[name]()
        x = (P.lower + P.upper) / 2
        a = [P.episode(x, 1, Drift(), np.random.default_rng(s)) for s in (1, 1, 2)]
        assert a[0] == a[1] != a[2]
        assert a[0] != P.cost(x, 1, Drift())
        # the batch path and the one-episode path are the same computation
        X = np.vstack([x, P.lower])
        assert P.costs(X, P.params(1, Drift())) == pytest.approx(
            [P.cost(X[0], 1, Drift()), P.cost(X[1], 1, Drift())], rel=1e-12)


# ---------------------------------------------------------------------- drift
def test_drift_levels_map_to_the_documented_physical_parameters():
    P, T = tc.FAMILY["tc-cartpole-4d-lqr"](), tc.FAMILY["tc-tank-sse"]()
    c0, k0 = cp.Params(), tk.Params()
    assert P.params(50, Drift("none")) == c0 and T.params(50, Drift("none")) == k0
    for kind in ("jump-large", "two-jumps", "optimum-jump", "jump-small"):
        assert P.params(9, drift(kind)) == c0 and T.params(9, drift(kind)) == k0
    assert P.params(15, drift("jump-large")).friction == pytest.approx(2.5 * c0.friction)
    assert P.params(15, drift("ramp")).friction == pytest.approx(1.75 * c0.friction)
    assert P.params(15, drift("periodic")).friction == pytest.approx(2.5 * c0.friction)
    two = P.params(25, drift("two-jumps"))
    assert (two.friction, two.mass_pole) == pytest.approx((2.5 * c0.friction, 1.5 * c0.mass_pole))
    assert P.params(15, drift("optimum-jump")).actuator_gain == pytest.approx(0.7)
    assert P.params(15, drift("jump-small")).actuator_gain == pytest.approx(1 - P.small)
    assert T.params(15, drift("jump-large")).k3 == pytest.approx(0.7 * k0.k3)
    tt = T.params(25, drift("two-jumps"))
    assert (tt.k1, tt.k2, tt.k3) == pytest.approx((0.7 * k0.k1, 0.7 * k0.k2, 0.7 * k0.k3))
    assert T.params(15, drift("optimum-jump")).target == pytest.approx(3.0)
    assert T.params(15, drift("jump-small")).k3 == pytest.approx((1 - T.small) * k0.k3)


def argmin(P, p) -> tuple[np.ndarray, float]:
    X = sobol(P, 256, seed=3)
    v = P.costs(X, p)
    r = minimize(lambda x: float(P.costs(x[None], p)[0]), X[np.argmin(v)], method="L-BFGS-B",
                 bounds=list(zip(P.lower, P.upper)))
    return r.x, float(r.fun)


@pytest.mark.parametrize("name", sorted(tc.FAMILY))
def test_small_jump_moves_the_nominal_optimums_cost_by_three_noise_sds(name):
    P = tc.FAMILY[name]()
    x0, c0 = argmin(P, P.params(0, Drift()))
    rng = np.random.default_rng(2024)
    sd = np.std([P.episode(x0, 0, Drift(), rng) for _ in range(100)], ddof=1)
    change = abs(P.cost(x0, 15, drift("jump-small")) - c0) / sd
    assert change == pytest.approx(tc.SMALL_SIGMAS, rel=0.2)
    large = abs(P.cost(x0, 15, drift("jump-large")) - c0) / sd
    assert large > change


@pytest.mark.parametrize("name", sorted(tc.PLANTS))
def test_optimum_jump_moves_the_optimal_gains_by_a_tenth_of_the_box(name):
    P = tc.FAMILY[name]()
    x0, _ = argmin(P, P.params(0, Drift()))
    x1, _ = argmin(P, P.params(15, drift("optimum-jump")))
    assert np.max(np.abs(x1 - x0) / (P.upper - P.lower)) > 0.1


# ---------------------------------------------------------------------- catastrophes
def parameter_sets(P) -> list:
    return [P.params(t, drift(kind)) for kind, t in CASES]


@pytest.mark.parametrize("dim", [2, 4])
def test_cartpole_floor_lies_between_upright_and_fallen_episodes(dim):
    P = tc.cartpole(dim, "lqr")
    X = np.vstack([sobol(P, 512), corners(P)])
    fell_any = False
    for p in parameter_sets(P):
        lqr, itae, worst = cp.simulate(cp.full_gains(X, P.prefix), p)
        fell = worst > cp.FALL
        fell_any |= fell.any()
        for c, objective in ((lqr, "lqr"), (itae, "itae")):
            floor = tc.CARTPOLE_CATASTROPHE[objective]
            assert np.all(c[~fell] < 0.5 * floor)
            assert np.all(c[fell] > floor)
    assert fell_any


def test_destabilising_box_corners_are_catastrophes_and_the_optimum_is_not():
    P = tc.FAMILY["tc-cartpole-4d-lqr"]()
    corner = np.array([P.lower[0], P.lower[1], P.upper[2], P.upper[3]])  # weak pole damping
    assert P.cost(corner, 1, Drift()) >= P.catastrophic_cost
    assert P.episode(corner, 1, Drift(), np.random.default_rng(0)) >= P.catastrophic_cost
    assert P.cost(P.prefix, 1, Drift()) < P.catastrophic_cost  # the LQR gain
    P2 = tc.FAMILY["tc-cartpole-2d-itae"]()
    weak = np.array([P2.upper[0], P2.upper[1]])
    assert P2.cost(weak, 1, Drift()) < P2.catastrophic_cost
    assert P2.cost(weak, 15, drift("optimum-jump")) >= P2.catastrophic_cost  # actuator -30 %
    T = tc.FAMILY["tc-tank-sse"]()
    slow = np.array([T.lower[0], T.upper[1]])  # low kp, high ki: the upper tank overflows
    cost, spilled = T.raw(slow[None], T.params(25, drift("two-jumps")))
    assert spilled[0] and cost[0] < T.catastrophic_cost
    assert T.cost(slow, 25, drift("two-jumps")) == T.catastrophic_cost == tc.tank_bound("sse")
    assert T.cost(slow, 1, Drift()) < T.catastrophic_cost


@pytest.mark.parametrize("objective", tk.OBJECTIVES)
def test_tank_costs_that_keep_the_water_stay_below_the_overflow_cost(objective):
    T = tc.tank(objective)
    X = np.vstack([sobol(T, 512), corners(T)])
    spilled_any = False
    for p in parameter_sets(T):
        c, spilled = T.raw(X, p)
        spilled_any |= spilled.any()
        assert np.all(c[~spilled] < T.catastrophic_cost)
        assert np.all(T.costs(X, p)[spilled] == T.catastrophic_cost)
    assert spilled_any


# ---------------------------------------------------------------------- best cost
@pytest.mark.parametrize("name", sorted(tc.PLANTS))
def test_best_cost_is_at_most_the_cost_of_200_random_gains(name):
    P = tc.FAMILY[name]()
    rng = np.random.default_rng(11)
    X = P.lower + rng.random((200, len(P.lower))) * (P.upper - P.lower)
    for kind, t in (("none", 0), ("jump-large", 15)):
        best = P.best_cost(t, drift(kind))
        assert np.all(P.costs(X, P.params(t, drift(kind))) >= best)
    assert P.best_cost(12, drift("jump-large")) == best  # one search per parameter set
    assert len(P._best.values) == 2


def test_best_cost_is_deterministic():
    a, b = tc.tank("sse"), tc.tank("sse")
    assert a.best_cost(15, drift("optimum-jump")) == b.best_cost(15, drift("optimum-jump"))


if __name__ == "__main__":
    sys.exit(write_fixture())
