"""`tvbod bench adaptive | agpucb`: test functions, tiny end-to-end runs, the CLI registration."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from tvbod.bench import adaptive, agpucb, composition as comp
from tvbod.bench.testfunctions import ALL_PROBLEMS, problem


@pytest.mark.parametrize("name, x", [
    ("branin", [np.pi, 2.275]), ("rosenbrock-5", [1.0] * 5), ("ackley-10", [0.0] * 10),
    ("levy-2", [1.0, 1.0]),
    ("hartmann6", [0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573]),
])
def test_known_minima(name, x):
    p = problem(name)
    assert p(np.array([x]))[0] == pytest.approx(p.f_min, abs=1e-5)


def test_every_problem_is_defined_and_its_minimum_is_a_lower_bound():
    rng = np.random.default_rng(0)
    for name in ALL_PROBLEMS:
        p = problem(name)
        X = np.array(p.lower) + rng.random((500, p.dim)) * (np.array(p.upper) - np.array(p.lower))
        assert np.all(p(X) >= p.f_min - 1e-9)


def test_rkhs_function_has_the_requested_norm_scale():
    f, grid = agpucb.rkhs_function(2.0, np.random.default_rng(1))
    assert np.isfinite(grid).all() and 0 < np.abs(grid).max() < 2.0 * agpucb.CENTERS
    assert f(np.array([0.3])).shape == (1,)


def _args(module, **kw):
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    ns = p.parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_adaptive_end_to_end(tmp_path, capsys):
    args = _args(adaptive, problems="branin", noises="0.01", trials=1, evals=6, workers=1,
                 out=tmp_path, no_plots=False)
    assert adaptive.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    labels = {a["label"] for a in doc["summary"]}
    assert len(labels) == len(adaptive.algorithms()) == 9
    assert (tmp_path / "kappa.png").exists()
    fixed = next(a for a in doc["summary"] if a["label"] == "GP-UCB (kappa=0.5)")
    assert set(fixed["kappa_mean"]) == {0.5}  # fixed kappa really is fixed
    assert "GP-EI" in capsys.readouterr().out


def test_adaptive_grid_resumes_from_runs_jsonl_and_skips_a_torn_line(tmp_path, capsys):
    common = dict(problems="branin", noises="0.01", evals=4, workers=1, out=tmp_path, no_plots=True)
    assert adaptive.run(_args(adaptive, trials=1, **common)) == 0
    runs = tmp_path / "runs.jsonl"
    first = {json.loads(line)["key"]: json.loads(line) for line in runs.read_text().splitlines()}
    assert len(first) == 9
    with runs.open("a") as f:
        f.write('{"key": "torn')  # a grid killed mid-write
    capsys.readouterr()
    assert adaptive.run(_args(adaptive, trials=2, **common)) == 0
    assert "[adaptive] resuming: 9 of 18 tasks" in capsys.readouterr().err
    recorded = [json.loads(line) for line in runs.read_text().splitlines() if line.endswith("}")]
    assert len({r["key"] for r in recorded}) == 18 and len(recorded) == 18  # nothing re-run
    # a resumed grid equals a fresh one: runs are seeded per (seed, trial), not by order
    assert adaptive.run(_args(adaptive, trials=2, fresh=True, **common)) == 0
    fresh = {json.loads(line)["key"]: json.loads(line) for line in runs.read_text().splitlines()}
    assert len(fresh) == 18
    for key, r in first.items():
        assert fresh[key]["values"] == r["values"]


def test_agpucb_end_to_end(tmp_path):
    args = _args(agpucb, runs=1, horizon=6, workers=1, out=tmp_path)
    assert agpucb.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["summary"]) == 8 and (tmp_path / "agpucb.png").exists()
    for a in doc["summary"]:
        assert all(b >= c for c, b in zip(a["g_mean"], a["g_mean"][1:]))  # g(t) non-decreasing


def test_benches_are_registered_in_the_cli():
    from tvbod import commands

    assert commands.BENCHES["adaptive"][0] == "tvbod.bench.adaptive"
    assert commands.BENCHES["agpucb"][0] == "tvbod.bench.agpucb"


@pytest.mark.parametrize("composition", ["within-model", "cartpole"])
def test_composition_runs_each_variant_on_the_same_realisation(tmp_path, capsys, composition):
    args = _args(adaptive, composition=composition, trials=2, horizon=12, workers=1, out=tmp_path)
    args.no_plots = composition == "cartpole"  # one of the two draws the figures
    assert adaptive.run(args) == 0
    doc = json.loads((tmp_path / f"composition-{composition}.json").read_text())
    assert [a["label"] for a in doc["algorithms"]] == [label for label, _ in comp.COMPOSED]
    realisations = [a["realisation"] for a in doc["algorithms"]]
    assert all(r == realisations[0] for r in realisations)
    diag = {d["label"]: d for d in doc["diagnostics"]}
    assert diag["ET-GP-UCB"]["better_than_et"] == diag["ET-GP-UCB"]["worse_than_et"] == 0
    assert diag["ET-GP-UCB"]["final_state_median"] == {}
    assert set(diag["ET-GP-UCB + adaptive kappa"]["final_state_median"]) == {"kappa", "lambda"}
    assert set(diag["ET-GP-UCB + A-GP-UCB"]["final_state_median"]) == {"h"}
    assert set(diag["ET-GP-UCB + A-GP-UCB (B_0 = 0.1)"]["final_state_median"]) == {"h"}
    assert diag["ET-GP-UCB + A-GP-UCB"]["final_state_median"]["h"] >= 1.0
    assert "runs better / worse than ET-GP-UCB" in capsys.readouterr().out
    assert (tmp_path / f"composition-{composition}" / "regret.png").exists() != args.no_plots


def test_aggregate_ranks_algorithms_and_groups_the_claim_by_dimension_and_noise():
    labels = [label for label, _ in adaptive.algorithms()]

    def cell(name, noise, best_label, adaptive_better):
        rows = []
        for i, label in enumerate(labels):
            regret = 10.0 + i  # adaptive 10-12, GP-EI 17, random 18
            if label.startswith("GP-UCB"):  # indices 3-6
                regret = 20.0 + i if adaptive_better else 2.0 + i
            if label == best_label:
                regret = 1.0
            rows.append({"problem": name, "noise": noise, "label": label, "regret_mean": regret,
                         "norm_regret_mean": regret / 1000.0})
        return rows

    summary = (cell("branin", 0.01, "GP-EI", adaptive_better=True)
               + cell("levy-10", 0.01, "GP-EI", adaptive_better=False)
               + cell("levy-10", 0.05, "Sobol random", adaptive_better=False))
    checks = adaptive.claims(summary)
    assert [c["adaptive_wins"] for c in checks] == [True, False, False]
    agg = adaptive.aggregate(summary, checks)
    ranks = {a["label"]: a for a in agg["algorithms"]}
    assert agg["cells"] == 3
    assert ranks["GP-EI"]["cells_won"] == 2 and ranks["Sobol random"]["cells_won"] == 1
    assert ranks["GP-EI"]["mean_rank"] == pytest.approx((1 + 1 + 9) / 3)
    assert ranks["adaptive (lambda_1=0.001)"]["mean_rank"] == pytest.approx((2 + 6 + 6) / 3)
    assert agg["claim"]["d = 2"] == {"cells": 1, "adaptive_wins": 1, "significant_wins": 0,
                                     "significant_losses": 0,  # no per-trial regrets: no test
                                     "median_ratio": pytest.approx(10.0 / 23.0)}
    assert agg["claim"]["d = 10"]["adaptive_wins"] == 0 and agg["claim"]["d = 10"]["cells"] == 2
    assert agg["claim"]["noise 0.01"]["cells"] == 2 and agg["claim"]["all"]["adaptive_wins"] == 1
    assert "mean rank of 3 cells" in adaptive.format_aggregate(agg)


def test_claims_test_significance_on_the_per_trial_regrets():
    rng = np.random.default_rng(0)

    def rows(adaptive_regrets, fixed_regrets):
        out = []
        for label, _ in adaptive.algorithms():
            r = adaptive_regrets if label.startswith("adaptive") else fixed_regrets
            out.append({"problem": "branin", "noise": 0.01, "label": label, "regrets": list(r),
                        "regret_mean": float(np.mean(r)), "norm_regret_mean": float(np.mean(r))})
        return out

    clear = adaptive.claims(rows(rng.uniform(0, 1, 30), rng.uniform(2, 3, 30)))[0]
    assert clear["adaptive_wins"] and clear["p_value"] < 1e-6 and clear["ranks_favour_adaptive"]
    same = rng.uniform(0, 1, 30)
    tie = adaptive.claims(rows(same, same))[0]
    assert not tie["adaptive_wins"] and tie["p_value"] == 1.0
    agg = adaptive.aggregate(rows(rng.uniform(0, 1, 30), rng.uniform(2, 3, 30)),
                             adaptive.claims(rows(rng.uniform(0, 1, 30), rng.uniform(2, 3, 30))))
    assert agg["claim"]["all"]["significant_wins"] == 1 and agg["claim"]["all"]["significant_losses"] == 0
    # the mean and the ranks can disagree: adaptive's mean is lower (fixed has one stuck trial),
    # but its regrets rank higher in 29 of 30 trials -> a significant loss, not a win
    mixed = adaptive.claims(rows(np.full(30, 0.01) + rng.uniform(0, 1e-3, 30),
                                 np.r_[np.full(29, 1e-4) + rng.uniform(0, 1e-5, 29), 5.0]))[0]
    assert mixed["adaptive_wins"] and mixed["p_value"] < 1e-6 and not mixed["ranks_favour_adaptive"]
    agg = adaptive.aggregate(rows(np.zeros(30), np.zeros(30)), [mixed])
    assert agg["claim"]["all"]["significant_wins"] == 0 and agg["claim"]["all"]["significant_losses"] == 1
