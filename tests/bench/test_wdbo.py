"""W-DBO as an outside anchor (tvbod/bench/wdbo.py): without the anchors extra the benches say so
and keep their rows; with it (skipped otherwise) W-DBO runs on the same plant realisation as the other
rows, accounted exactly as `cartpole.run_task`, reproducibly."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from tvbod.bench import cartpole as cp
from tvbod.bench import plant_runs as pr
from tvbod.bench import wdbo
from tvbod.bench import within_model as wm

from probes import loaded_modules

HAS_WDBO = wdbo.available()
needs_wdbo = pytest.mark.skipif(not HAS_WDBO, reason="needs the anchors extra (wdbo-algo, torch)")


def _args(module, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p.parse_args(argv)


def test_the_daemon_the_core_and_the_bench_hooks_import_no_torch():
    # In the anchors venv torch is importable: nothing on these paths may load it.
    loaded = loaded_modules("import tvbod.commands, tvbod.core, tvbod.commands.run, tvbod.service.server\n"
                            "import tvbod.bench.cartpole, tvbod.bench.within_model, tvbod.bench.wdbo\n"
                            "tvbod.bench.wdbo.available()")
    assert sorted(m for m in loaded
                  if m.split(".")[0] in ("torch", "gpytorch", "botorch", "wdbo_algo")) == []


def test_no_wdbo_flag_leaves_the_row_out_silently(capsys):
    assert _args(cp, ["--no-wdbo"]).no_wdbo and _args(wm, ["--no-wdbo"]).no_wdbo
    assert not _args(cp, []).no_wdbo
    assert wdbo.rows(False) == ()
    assert capsys.readouterr().out == ""
    assert _args(cp, ["--algos", "wdbo,gp-ucb"]).algos == ("wdbo", "gp-ucb")


@pytest.mark.skipif(HAS_WDBO, reason="wdbo-algo is installed")
def test_without_wdbo_algo_within_model_prints_the_note_and_keeps_its_cases(tmp_path, capsys):
    args = _args(wm, ["--runs", "1", "--horizon", "4", "--workers", "1", "--grid", "5",
                      "--cases", "main", "--no-plots", "--out", str(tmp_path)])
    assert wm.run(args) == 0
    out = capsys.readouterr().out
    assert wdbo.NOT_INSTALLED in out and "W-DBO " not in out.replace(wdbo.NOT_INSTALLED, "")
    import json

    doc = json.loads((tmp_path / "results.json").read_text())
    expected = [[label for label, _ in c.algos] for c in wm.build_cases(("main",))]
    assert [[a["label"] for a in c["algorithms"]] for c in doc["cases"]] == expected
    assert doc["config"]["wdbo"] is None


@pytest.mark.skipif(HAS_WDBO, reason="wdbo-algo is installed")
def test_cartpole_asked_for_wdbo_alone_without_it_says_so_and_fails_cleanly(tmp_path, capsys):
    args = _args(cp, ["--algos", "wdbo", "--runs", "1", "--out", str(tmp_path)])
    assert cp.run(args) == 2
    captured = capsys.readouterr()
    assert wdbo.NOT_INSTALLED in captured.out and "nothing to run" in captured.err
    assert not (tmp_path / "results.json").exists()


def test_with_wdbo_the_main_within_model_cases_gain_one_row():
    cases = wm.build_cases(wm.CASE_GROUPS)
    added = wm.with_wdbo(cases)
    for before, after in zip(cases, added):
        extra = after.algos[len(before.algos):]
        assert after.algos[:len(before.algos)] == before.algos
        assert extra == (((wdbo.LABEL, wm.Algo(wdbo.STRATEGY)),) if before.group == "main" else ())


# ---------------------------------------------------------------------- with the anchors extra
@needs_wdbo
def test_wdbo_cartpole_regret_is_run_tasks_accounting_on_the_same_realisation():
    cfg = cp.Config(horizon=18, jump_at=10, candidates=64)
    res = cp.run_task(1, wdbo.ALGO, 0, cfg)
    assert res["label"] == "W-DBO" and len(res["regret"]) == len(res["points"]) == 18
    assert res["lengthscales"] is not None  # past the 15-point initial design: a fitted model
    # The same plant realisation as every other row of run 1.
    ref = cp.run_task(1, pr.Algo("GP-UCB", "gp-ucb"), 0, cfg)
    assert res["realisation"] == ref["realisation"]
    # Re-measure W-DBO's points on a fresh plant of that run with run_task's rule.
    plant = cp.make_plant(pr.run_seed(0, 1), cfg.jump_at, cfg.profile)
    from plant_adapters.cartpole.dynamics import DOMAIN_LOWER, DOMAIN_UPPER

    lo, hi = np.array(DOMAIN_LOWER), np.array(DOMAIN_UPPER)
    failures = 0
    for t, (x, r) in enumerate(zip(res["points"], res["regret"]), start=1):
        x = np.array(x)
        assert np.all(x >= lo - 1e-9) and np.all(x <= hi + 1e-9)
        ev = plant.evaluate(x, t)
        failures += ev.failed
        assert r == (plant.max_cost - ev.optimal_cost if ev.failed else ev.regret)
    assert res["failures"] == failures


@needs_wdbo
def test_wdbo_cartpole_run_is_reproducible_and_leaves_global_state_alone():
    import torch

    cfg = cp.Config(horizon=17, jump_at=10)
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    dtype = torch.get_default_dtype()
    a = cp.run_task(0, wdbo.ALGO, 0, cfg)
    assert np.random.random() == before and torch.get_default_dtype() == dtype
    b = cp.run_task(0, wdbo.ALGO, 0, cfg)
    assert a["points"] == b["points"] and a["regret"] == b["regret"]
    c = cp.run_task(1, wdbo.ALGO, 0, cfg)
    assert c["points"][0] != a["points"][0]  # another run, another initial design


@needs_wdbo
def test_wdbo_within_model_measures_grid_points_of_the_shared_draw():
    grid, horizon = 6, 17
    F = wm.sample_functions(wm.sampler_factor(grid), 0.03, horizon, np.random.default_rng(0))
    noise = math.sqrt(wm.NOISE_VARIANCE) * np.random.default_rng(1).standard_normal(horizon)
    res = wm.run_algorithm(wm.Algo(wdbo.STRATEGY), F, noise, 7, grid)
    r = np.asarray(res["regret"])
    assert r.shape == (horizon,) and np.all(r >= 0) and res["reset_times"] == []
    # every regret is max f_t - f_t(some grid point)
    gaps = F.max(axis=1)[:, None] - F
    assert all(np.isclose(gaps[k], r[k]).any() for k in range(horizon))
