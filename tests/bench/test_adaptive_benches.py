"""`tvbod bench adaptive | agpucb`: test functions, tiny end-to-end runs, the CLI registration."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from tvbod.bench import adaptive, agpucb
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


def test_agpucb_end_to_end(tmp_path):
    args = _args(agpucb, runs=1, horizon=6, workers=1, out=tmp_path)
    assert agpucb.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["summary"]) == 8 and (tmp_path / "agpucb.png").exists()
    for a in doc["summary"]:
        assert all(b >= c for c, b in zip(a["g_mean"], a["g_mean"][1:]))  # g(t) non-decreasing


def test_benches_are_registered_in_the_cli():
    from tvbod import cli

    assert cli.BENCHES["adaptive"][0] == "tvbod.bench.adaptive"
    assert cli.BENCHES["agpucb"][0] == "tvbod.bench.agpucb"
