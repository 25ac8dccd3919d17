"""`tvbod bench cartpole | temperature`: tiny end-to-end runs, common random numbers, the
detection delay, the measurement scaling, the CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvbod.bench import cartpole as cp
from tvbod.bench import plant_runs as pr
from tvbod.bench import temperature as tp
from tvbod.bench import wdbo

STRATEGIES = ["et-gp-ucb", "gp-ucb", "r-gp-ucb", "tv-gp-ucb", "ui-tvbo"]


def _args(module, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p.parse_args(argv)


def _first_divergence_ok(a: dict, b: dict, upto: int) -> bool:
    """Same regret at every step t <= upto in every run (same point, same t, same plant)."""
    return all(np.array_equal(ra[:upto], rb[:upto]) for ra, rb in zip(a["regret"], b["regret"]))


@pytest.fixture(scope="module")
def cartpole_doc(tmp_path_factory) -> dict:
    # Through the CLI in a child process: `tvbod` pins BLAS to one thread before numpy loads (a
    # multi-threaded BLAS in this process made the MAP refits ~10x slower on a loaded host).
    out = tmp_path_factory.mktemp("cartpole")
    argv = ["bench", "cartpole", "--runs", "2", "--horizon", "30", "--jump-at", "10",
            "--workers", "1", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "tvbod", *argv], capture_output=True, text=True,
                          timeout=900, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert "ET-GP-UCB detection of the change at t = 10" in proc.stdout
    # Without the anchors extra the W-DBO row is left out with a one-line note.
    assert (wdbo.NOT_INSTALLED in proc.stdout) == (not wdbo.available())
    assert (out / "regret.png").exists() and (out / "resets.png").exists()
    return json.loads((out / "results.json").read_text())


def test_cartpole_tiny_run_shares_the_plant_realisation(cartpole_doc):
    # Property: all five algorithms ran on the same plant (noise and friction) in each run.
    algos = {a["strategy"]: a for a in cartpole_doc["algorithms"]}
    assert sorted(algos) == sorted(STRATEGIES + ["wdbo"] * wdbo.available())
    assert [a["label"] for a in cartpole_doc["algorithms"]] == [
        a.label for a in cp.algorithms() + wdbo.rows(True)]
    assert cartpole_doc["same_realisation"]
    seeds = [r["plant_seed"] for r in algos["gp-ucb"]["realisation"]]
    assert len(set(seeds)) == 2  # runs differ
    # Same seed, same data: GP-UCB and ET-GP-UCB propose the same points until ET's first reset,
    # and R-GP-UCB until its period (29), so their regrets agree step by step up to there.
    gp, et, r = algos["gp-ucb"], algos["et-gp-ucb"], algos["r-gp-ucb"]
    first = min((times[0] for times in et["reset_times"] if times), default=30)
    assert _first_divergence_ok(gp, et, first)
    assert _first_divergence_ok(gp, r, 29)
    assert all(len(x) == 30 for x in gp["regret"])


def test_cartpole_same_point_same_t_same_regret():
    # Property: the plant of a run is a pure function of its seed (common random numbers).
    x = np.array([-2.5, -5.0, -30.0, -3.0])
    a, b = cp.make_plant(123, jump_at=5), cp.make_plant(123, jump_at=5)
    for t in (1, 4, 5, 9):
        assert a.evaluate(x, t) == b.evaluate(x, t)
    assert a.evaluate(x, 4).optimal_cost != a.evaluate(x, 5).optimal_cost


def test_cartpole_detection_stats_reported(cartpole_doc):
    d = cartpole_doc["detection"]
    assert d["t0"] == 10 and d["runs"] == 2
    assert d["detected"] == len(d["delays"]) <= 2
    assert {c["name"].split(":")[0] for c in cartpole_doc["claims"]} == {"cart-pole"}


def test_detection_delay_on_hand_made_resets():
    resets = [[3, 100, 140], [101], [], [50, 60, 99], [120, 130]]
    d = pr.detection_stats(resets, t0=100, window=5)
    assert d["delays"] == [0, 1, 20]           # run 2: none at/after t0; run 3: only false ones
    assert (d["detected"], d["within_window"]) == (3, 2)
    assert (d["median_delay"], d["min_delay"], d["max_delay"]) == (1.0, 0, 20)
    assert (d["false_resets"], d["runs_with_false"]) == (4, 2)
    empty = pr.detection_stats([[1], []], t0=10, window=5)
    assert empty["median_delay"] is None and empty["detected"] == 0


def _algo(label: str, strategy: str, R: list[float]) -> dict:
    return {"label": label, "strategy": strategy, "R_T": R, "R_T_mean": float(np.mean(R)),
            "R_T_median": float(np.median(R))}


def test_lowest_regret_claim_needs_a_strict_win():
    # Property: a tie with another algorithm (ET-GP-UCB that never resets == GP-UCB) is no win.
    tie = [_algo("ET-GP-UCB", "et-gp-ucb", [2.0, 4.0]), _algo("GP-UCB", "gp-ucb", [2.0, 4.0])]
    assert not pr.lowest_regret_check(tie, "x")["holds"]
    win = [_algo("ET-GP-UCB", "et-gp-ucb", [1.0, 4.0]), _algo("GP-UCB", "gp-ucb", [2.0, 4.0])]
    assert pr.lowest_regret_check(win, "x")["holds"]
    assert pr.wins(win) == {"ET-GP-UCB": 2, "GP-UCB": 1}  # ties count for each


def test_measurement_scaling_maps_the_nominal_cost_range_onto_pm2():
    from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

    sample = cp.scaling_sample()
    assert sample.shape == (cp.SCALING_POINTS + 16, 4)
    assert np.all(sample >= DOMAIN_LOWER) and np.all(sample <= DOMAIN_UPPER)
    corners = {tuple(c) for c in sample[-16:]}
    assert (DOMAIN_LOWER in corners) and (DOMAIN_UPPER in corners)
    s = cp.measurement_scaling()
    assert s == cp.measurement_scaling()  # fixed: no dependence on a run
    assert (s["cost_max"] - s["offset"]) / s["scale"] == pytest.approx(2.0)
    assert (s["cost_min"] - s["offset"]) / s["scale"] == pytest.approx(-2.0)
    # the LQR optimum at nominal friction is (about) the sample's minimum, at the edge of [-2, 2]
    _, j_star = cp.make_plant(0).optimum(1)
    assert -2.05 < (j_star - s["offset"]) / s["scale"] <= -2.0 + 1e-9


def test_temperature_tiny_run(tmp_path):
    args = _args(tp, ["--runs", "2", "--horizon", "20", "--workers", "1", "--no-plots",
                      "--out", str(tmp_path)])
    assert tp.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    algos = {a["strategy"]: a for a in doc["algorithms"]}
    assert sorted(algos) == sorted(STRATEGIES)
    assert doc["same_realisation"]
    gp, et = algos["gp-ucb"], algos["et-gp-ucb"]
    first = min((times[0] for times in et["reset_times"] if times), default=20)
    assert _first_divergence_ok(gp, et, first)
    # the regret is max_a f_t(a) - f_t(chosen) on the shared data
    _, z = tp.plant_data()
    arms = np.array(gp["arms"][0])
    expected = z[:, :20].max(axis=0) - z[arms, np.arange(20)]
    np.testing.assert_allclose(gp["regret"][0], expected, atol=1e-6)


def test_cli_parses_both_benches():
    from tvbod.commands import build_parser

    a = build_parser().parse_args(["bench", "cartpole", "--runs", "3", "--jump-at", "20"])
    assert (a.runs, a.jump_at, a.horizon, a.workers, a.seed) == (3, 20, 300, 2, 0)
    assert str(a.out) == "bench-out/cartpole" and a.refit_every == 1 and a.algos is None
    b = build_parser().parse_args(["bench", "temperature", "--seed", "4"])
    assert (b.runs, b.horizon, b.workers, b.seed) == (20, 96, 2, 4)
    assert str(b.out) == "bench-out/temperature"
    assert _args(cp, ["--algos", "et-gp-ucb,gp-ucb"]).algos == ("et-gp-ucb", "gp-ucb")
    with pytest.raises(SystemExit):
        _args(cp, ["--algos", "bogus"])


def test_cartpole_oracle_grid_rows_and_the_papers_reset_period():
    rows = cp.algorithms(oracle=True)
    labels = [a.label for a in rows]
    assert len(labels) == len(set(labels))
    assert labels[:3] == ["ET-GP-UCB", "ET-GP-UCB (fixed scale)", "ET-GP-UCB (paper trigger)"]
    assert dict(rows[0].params) == {pr.SHIPPED: "cartpole"}  # the shipped file's optimizer
    for strategy in ("r-gp-ucb", "tv-gp-ucb", "ui-tvbo"):
        assert sum(a.strategy == strategy for a in rows) == len(cp.ORACLE_GRID)
    # N = ceil(12 eps^(-1/4)): the paper's N = 29 at eps = 0.03
    assert [cp.reset_period_for(e) for e in cp.ORACLE_GRID] == [46, 38, 32, 29, 26]
    assert len(cp.algorithms()) == 7


def test_cartpole_units_leave_the_shipped_optimizer_unchanged_and_move_the_fixed_scale():
    # `--units 4`: every cost x 4 (exact in binary). The shipped ET-GP-UCB (`measurement: auto`)
    # follows the same trajectory; the fixed-scale variant sees another problem.
    algos = cp.algorithms()[:2]
    base = cp.Config(horizon=40, jump_at=30, offset=16.0, scale=1.0, candidates=256)
    four = cp.Config(horizon=40, jump_at=30, offset=16.0, scale=1.0, candidates=256, units=4.0)
    auto1, auto4 = (cp.run_task(0, algos[0], 0, c) for c in (base, four))
    assert auto1["regret"] == auto4["regret"] and auto1["reset_times"] == auto4["reset_times"]
    fixed1, fixed4 = (cp.run_task(0, algos[1], 0, c) for c in (base, four))
    assert fixed1["regret"] != fixed4["regret"]


# ---------------------------------------------------------------------- as-shipped rows
def _shipped_spec(plant_file: str):
    from tvbod.resources import shipped
    from tvbod.service.config import load_plant_config

    return load_plant_config(Path(str(shipped(f"configs/plants/{plant_file}.yaml")))).optimizer


def _differences(bench_mapping: dict, plant_file: str) -> set[str]:
    """The OptimizerSpec fields where the bench's row differs from the shipped file's."""
    import dataclasses

    from tvbod.core.spec import parse_spec

    mine, theirs = parse_spec(bench_mapping), _shipped_spec(plant_file)
    out = set()
    for f in dataclasses.fields(theirs):
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        same = (np.array_equal(a.matrix, b.matrix) and dataclasses.replace(a, matrix=None)
                == dataclasses.replace(b, matrix=None)) if f.name == "kernel" and getattr(
                    a, "matrix", None) is not None else a == b
        if not same:
            out.add(f.name)
    return out


def test_the_cartpole_bench_s_shipped_row_is_the_shipped_file_but_its_seed():
    row = cp.algorithms()[0]
    assert row.label == "ET-GP-UCB"
    assert _differences(cp.build_spec(row, cp.Config(), seed=1234), "cartpole") == {"seed"}
    # The other rows are not the shipped file (the test can fail: it sees a difference).
    assert "measurement_offset" in _differences(cp.build_spec(cp.algorithms()[1], cp.Config(), 1),
                                                "cartpole")


def test_the_temperature_bench_s_shipped_row_is_the_shipped_file_but_its_seed():
    row = tp.algorithms()[0]
    K, _ = tp.plant_data()
    assert _differences(tp.build_spec(row, K, seed=99), "temperature") == {"seed"}


def test_the_suite_s_shipped_rows_are_the_shipped_files_but_seed_and_box():
    from tvbod.bench.suite import algorithms as al
    from tvbod.bench.suite import plants as pl

    (row, _), = al.rows(("et-shipped",), 300)
    full = al.Budget()
    assert _differences(al.spec(pl.plant("cartpole"), row, 5, 300, full), "cartpole") == {"seed"}
    assert _differences(al.spec(pl.plant("temperature"), row, 5, 300, full),
                        "temperature") == {"seed"}
    # A plant without a shipped file: the cart-pole file with the box replaced (the kernel's
    # lengthscale, one per dimension, is the file's value in each of the new box's dimensions).
    motor = al.spec(pl.plant("dc-motor"), row, 5, 300, full)
    assert _differences(motor, "cartpole") == {"seed", "domain", "kernel"}
    from tvbod.core.spec import parse_spec

    shipped_ls = set(_shipped_spec("cartpole").kernel.lengthscales)
    assert parse_spec(motor).kernel.lengthscales == (*shipped_ls,) * 3
    # --quick changes the effort too, and only that.
    quick = _differences(al.spec(pl.plant("dc-motor"), row, 5, 30, al.QUICK), "cartpole")
    assert quick == {"seed", "domain", "kernel", "candidates", "starts", "maxiter", "hyper"}


def test_the_bounds_only_row_is_what_the_daemon_makes_of_a_bounds_only_plant_file(tmp_path):
    from tvbod.bench.suite import algorithms as al
    from tvbod.bench.suite.plants import plant
    from tvbod.service.config import load_plant_config

    p = plant("hartmann3")
    lines = [f"  - {{name: {n}, lower: {float(lo)!r}, upper: {float(hi)!r}}}"
             for n, lo, hi in zip(p.names, p.lower, p.upper)]
    path = tmp_path / "h3.yaml"
    path.write_text("name: h3\nparameters:\n" + "\n".join(lines)
                    + "\nsense: minimize\noptimizer: {strategy: et-gp-ucb}\n")
    daemon = load_plant_config(path).optimizer_mapping
    from tvbod.core.behaviours import spelled

    assert al.bounds_only(p, 7) == {**daemon, "seed": 7}
    full = spelled(daemon)  # what its behaviour version makes of it
    assert full["measurement"]["offset"] == "auto" and full["noise_variance"] == "auto"
