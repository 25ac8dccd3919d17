"""`tvbod bench within-model`: the function sampler, the regret, a tiny end-to-end run, the CLI."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from tvbod.bench import within_model as wm
from tvbod.bench import within_model_functions as wmf

SMALL_GRID = 8  # 64 points: the sampler tests do not need the 2,500-point grid


def _draws(eps: float, n_draws: int, horizon: int, seed: int = 3) -> np.ndarray:
    """`n_draws` independent sequences on the small grid, `(n_draws, horizon, m)`."""
    L = wmf.sampler_factor(SMALL_GRID)
    rng = np.random.default_rng(seed)
    return np.stack([wmf.sample_functions(L, eps, horizon, rng) for _ in range(n_draws)])


def test_sampler_marginal_variance_is_one():
    # Property: every f_t is marginally GP(0, k) with k(x, x) = 1, also after many AR steps.
    F = _draws(eps=0.3, n_draws=400, horizon=4)
    for t in range(4):
        assert F[:, t, :].var(axis=0).mean() == pytest.approx(1.0, abs=0.12)


def test_sampler_temporal_correlation_is_sqrt_one_minus_eps():
    # Property: corr(f_t(x), f_{t-1}(x)) = sqrt(1 - eps) at every x.
    eps = 0.3
    F = _draws(eps=eps, n_draws=400, horizon=3)
    a, b = F[:, 2, :].ravel(), F[:, 1, :].ravel()
    assert np.corrcoef(a, b)[0, 1] == pytest.approx(math.sqrt(1 - eps), abs=0.03)


def test_sampler_spatial_correlation_follows_the_se_kernel():
    # Property: corr(f_t(x), f_t(x')) = exp(-|x - x'|^2 / (2 * 0.2^2)) for grid neighbours.
    F = _draws(eps=0.05, n_draws=400, horizon=1)[:, 0, :]
    P = wmf.grid_points(SMALL_GRID)
    i, j = 0, 1  # (0, 0) and (0, 1/7)
    expected = math.exp(-np.sum((P[i] - P[j]) ** 2) / (2 * wmf.LENGTHSCALE**2))
    assert np.corrcoef(F[:, i], F[:, j])[0, 1] == pytest.approx(expected, abs=0.05)


def test_grid_index_round_trips_every_point():
    P = wmf.grid_points(SMALL_GRID)
    assert [wmf.grid_index(p, SMALL_GRID) for p in P] == list(range(len(P)))


def test_regret_is_non_negative_and_zero_at_the_argmax():
    F = np.random.default_rng(0).standard_normal((20, 50))
    assert np.all(wmf.regret(F, np.random.default_rng(1).integers(0, 50, 20)) >= 0)
    assert np.all(wmf.regret(F, F.argmax(axis=1)) == 0)


def test_cases_share_algorithms_where_the_paper_reuses_them():
    cases = {c.group: c for c in wm.build_cases(wm.CASE_GROUPS)}
    sweep = dict(cases["delta-sweep"].algos)
    main = [c for c in wm.build_cases(("main",)) if c.eps == wm.SWEEP_EPS][0]
    # delta_B = 0.1 in the sweep is the main case's ET-GP-UCB, so it is run once.
    assert sweep["ET-GP-UCB (delta_B=0.1)"] == dict(main.algos)["ET-GP-UCB"]
    assert {a.strategy for _, a in cases["misspecified"].algos} == {
        "et-gp-ucb", "gp-ucb", "r-gp-ucb", "tv-gp-ucb"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    wm.add_arguments(p)
    return p


def test_cli_options_parse():
    a = _parser().parse_args(["--runs", "3", "--cases", "main,delta-sweep", "--seed", "7"])
    assert (a.runs, a.cases, a.seed) == (3, ("main", "delta-sweep"), 7)
    assert (a.horizon, a.workers, a.grid) == (400, 2, wm.GRID)
    assert _parser().parse_args([]).cases == wm.CASE_GROUPS
    with pytest.raises(SystemExit):
        _parser().parse_args(["--cases", "main,bogus"])


def test_cli_dispatches_to_this_module():
    from tvbod.commands import build_parser

    a = build_parser().parse_args(["bench", "within-model", "--runs", "2", "--horizon", "30"])
    assert a._module == "tvbod.bench.within_model" and (a.runs, a.horizon) == (2, 30)


def test_tiny_run_writes_results_for_every_algorithm_on_shared_draws(tmp_path, capsys):
    # A 12 x 12 grid keeps this fast; `make demo` exercises the paper's 50 x 50 grid.
    args = _parser().parse_args(["--runs", "2", "--horizon", "30", "--workers", "1",
                                 "--grid", "12", "--no-wdbo", "--out", str(tmp_path)])
    assert wm.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "regret.png").stat().st_size > 0
    assert (tmp_path / "resets.png").stat().st_size > 0
    assert "ET-GP-UCB beats R-GP-UCB" in capsys.readouterr().out
    optimum = {}
    for case, expected in zip(doc["cases"], wm.build_cases(wm.CASE_GROUPS)):
        assert [a["label"] for a in case["algorithms"]] == [label for label, _ in expected.algos]
        for a in case["algorithms"]:
            assert len(a["R_T"]) == 2 and min(a["R_T"]) >= 0 and len(a["mean_R_t_over_t"]) == 30
            # Same function draws for every algorithm (and every case) at the same eps.
            assert optimum.setdefault(case["eps"], a["optimum_sum"]) == a["optimum_sum"]
    r = [a for a in doc["cases"][0]["algorithms"] if a["strategy"] == "r-gp-ucb"][0]
    assert r["resets"] == [30 // wm.RESET_PERIODS[0.01]] * 2
