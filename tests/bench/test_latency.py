"""`tvbod bench latency`: the table, the value check against the dense reference, the refactor baseline,
and the pruned float32 screen the ask relies on."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvbod.bench import latency, latency_reference, latency_report
from tvbod.core.screen import Float32Screen
from tvbod.core.acquisition import ucb
from tvbod.core.gp import ExactGP
from tvbod.core.kernels import ForgettingFactor, Matern52, SquaredExponential, WienerDrift

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["d", "n", "ask p50 ms", "ask p99 ms", "ask value/ref med (worst)", "tell p50 ms",
           "tell p99 ms", "refactor tell p50 ms", "refactor tell p99 ms", "refactor/append"]
HAS_BOTORCH = importlib.util.find_spec("botorch") is not None


def _run_module(*argv: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "tvbod.bench.latency", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("latency")
    proc = _run_module("--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads((out / "results.json").read_text())


def test_quick_run_prints_a_table_with_every_column(quick):
    # Property: one header with all columns, then one row per (d, n) of the quick settings.
    stdout, result = quick
    lines = [ln for ln in stdout.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    st = result["settings"]
    assert len(lines) == 2 + len(st["dims"]) * len(st["sizes"])
    cells = [(d, n) for d in st["dims"] for n in st["sizes"]]
    assert [(r["d"], r["n"]) for r in result["rows"]] == cells
    for row in result["rows"]:
        for key in ("ask_ms", "tell_ms", "tell_refactor_ms"):
            assert 0 < row[key]["p50"] <= row[key]["p99"]


def test_ask_value_never_exceeds_the_dense_reference(quick):
    # Property: the reference is the best value seen (it polishes the ask's own proposal too).
    for row in quick[1]["rows"]:
        assert row["ask_value_ratio"]["count"] >= 1
        assert row["ask_value_ratio"]["worst"] <= row["ask_value_ratio"]["median"] <= 1 + 1e-9


def test_refactor_per_tell_gives_the_append_posterior(quick):
    # Property: O(n^2) append and O(n^3) refactorization are the same posterior (round-off only).
    for row in quick[1]["rows"]:
        assert row["refactor_posterior_max_abs_diff"] < 1e-10
    base = latency.build_strategy(3, 150, seed=2)
    assert latency.refactor_posterior_gap(base, seed=2) < 1e-10


def test_refactor_copy_refactorizes_and_leaves_the_original_alone():
    base = latency.build_strategy(2, 30, seed=1)
    x, y = np.array([0.3, 0.6]), 0.2
    a, b = latency.told_copy(base, x, y, False), latency.told_copy(base, x, y, True)
    assert base.dataset_size == 30 and a.dataset_size == b.dataset_size == 31
    assert a.gp.full_n_ == base.gp.full_n_ == 1  # built by appends after the first tell
    assert b.gp.full_n_ == 31  # b was factorized in full


def test_dense_reference_bounds_every_point_it_is_given():
    # Property: the reference is >= the UCB at any extra start, and >= the ask's value.
    base = latency.build_strategy(2, 40, seed=3)
    t, beta = base.t, latency._beta(base, base.t)
    extra = np.random.default_rng(0).random((6, 2))
    ref = latency_reference.dense_reference(base.gp, t, beta, extra, candidates=512, starts=4, seed=5)
    assert ref["reference"] >= ref["dense_only"]
    assert ref["reference"] >= latency_reference.ucb_value(base.gp, extra, t, beta).max()
    x = base.ask()
    assert latency_reference.ucb_value(base.gp, x[None, :], t, beta)[0] <= ref["reference"] * (1 + 1e-9)


def test_value_ratio_text_shows_the_gap():
    assert latency_report.ratio_cell({"median": 1.0, "worst": 1 - 1e-12, "count": 2}) == "1 (1)"
    assert latency_report.ratio_cell({"median": 1 - 2e-6, "worst": 0.98765, "count": 2}) == "1-2e-06 (0.9877)"
    assert latency_report.ratio_cell({"median": None, "worst": None, "count": 0}) == "-"


def test_run_in_a_process_that_already_has_numpy_uses_a_pinned_child(tmp_path, capfd):
    # numpy is loaded here, so BLAS threads can no longer be set: run() must re-run in a child.
    parser = argparse.ArgumentParser()
    latency.add_arguments(parser)
    args = parser.parse_args(["--quick", "--dims", "1", "--sizes", "12", "--calls", "2",
                              "--out", str(tmp_path)])
    assert latency.run(args) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["environment"]["blas_threads"].values()) == {"1"}
    assert [(r["d"], r["n"]) for r in result["rows"]] == [(1, 12)]
    assert "| d | n |" in capfd.readouterr().out


@pytest.mark.skipif(HAS_BOTORCH, reason="botorch is installed")
def test_compare_botorch_without_the_anchors_extra_says_what_to_install():
    proc = _run_module("--quick", "--compare", "botorch")
    assert proc.returncode == 2
    assert "tvbod[anchors]" in proc.stderr
    assert "torch" not in sys.modules  # and nothing here imported it


@pytest.mark.skipif(not HAS_BOTORCH, reason="needs the anchors extra (torch, botorch)")
def test_compare_botorch_times_the_same_gp(tmp_path):
    proc = _run_module("--quick", "--dims", "2", "--sizes", "30", "--compare", "botorch",
                       "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert row["botorch_ms"]["p50"] > 0 and row["botorch_over_ask"] > 0
    assert row["botorch_value_ratio"]["worst"] <= 1 + 1e-9
    assert "botorch/ask" in proc.stdout


# ---------------------------------------------------------------------- the ask's pruned screen
@pytest.mark.parametrize("case", range(12))
def test_pruned_screen_finds_the_float32_top_k(case):
    # Property: ExactGP.screen_best returns the float32 screen's top k (up to float32 near-ties), for
    # both kernels, every temporal factor, uniform and clustered data, n past the pruning threshold.
    rng = np.random.default_rng(case)
    d, n, m, k = int(rng.integers(1, 6)), int(rng.integers(130, 400)), int(rng.integers(300, 1200)), 5
    kernel = (SquaredExponential if case % 2 else Matern52)(rng.uniform(0.15, 0.5, d))
    temporal = [None, ForgettingFactor(0.03), WienerDrift(0.01)][case % 3]
    X = rng.random((n, d))
    if case % 4 == 0:
        X[n // 2:] = 0.5 + 0.05 * rng.standard_normal((n - n // 2, d))
    y = np.sin(5 * X).sum(axis=1) + 0.1 * rng.standard_normal(n)
    gp = ExactGP(kernel, 0.02, temporal)
    gp.fit(X[:20], y[:20], np.arange(1.0, 21.0))
    for i in range(20, n):
        gp.append(X[i], y[i], i + 1.0)
    C, beta, t = rng.random((m, d)), rng.uniform(1.0, 9.0), n + 1.0
    score = ucb(*Float32Screen().predict(gp, C, t), beta)
    got = gp.screen_best(C, t, lambda mean, var: ucb(mean, var, beta), k)
    assert len(set(got.tolist())) == k
    kth = np.sort(score)[-k]
    assert score[got].min() >= kth - 1e-3 * abs(kth)  # only near-ties may swap


def test_cartpole_step_table_times_the_shipped_optimizer_with_its_refit(tmp_path):
    # `--cartpole-step`: one row per size, D grown to that size, the refit timed inside the step.
    proc = _run_module("--cartpole-step", "--quick", "--sizes", "12,20", "--calls", "3",
                       "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == [
        "n", "points in D", "step p50 ms", "step p99 ms", "step CPU p50 ms"]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["plant_file"] == "cartpole.yaml"
    assert [r["n"] for r in result["rows"]] == [12, 20]
    for row in result["rows"]:
        assert row["dataset_size"] <= row["n"]
        assert 0 < row["refit_ms"]["p50"] <= row["step_ms"]["p99"]
        assert 0 < row["refit_share"] < 1
        assert row["plants_per_core"] == pytest.approx(1000 / row["step_cpu_ms"]["p50"])
        assert 0 < row["refit_cpu_share"] < 1
        assert 0 < row["ask_ms"]["p50"] <= row["step_ms"]["p99"]
    assert result["polish"] == "lbfgsb-joint" and result["tolerance"] == 1e-5
    assert "goal cart-pole step p50 <= 15 ms and >= 70 plants per core at n=300: not measured" \
        in proc.stdout


def test_cartpole_step_legacy_refit_is_tvbod_0_2s():
    from tvbod.bench import cartpole_step

    shipped = cartpole_step.shipped_strategy(0).spec.hyper
    legacy = cartpole_step.shipped_strategy(0, "legacy").spec.hyper
    assert (legacy.objective, legacy.refit_tolerance) == ("explicit-inverse", 0.0)
    assert (shipped.objective, shipped.refit_tolerance) == ("factored", 0.05)
    assert legacy.maxiter == shipped.maxiter == 30  # otherwise the shipped file's own settings


def test_cartpole_step_polish_override_gives_the_newton_ask():
    from tvbod.bench import cartpole_step

    assert cartpole_step.shipped_strategy(0).budget.polish == "lbfgsb-joint"
    assert cartpole_step.shipped_strategy(0, polish="newton").budget.polish == "newton"
    assert latency.build_strategy(2, 3, polish="newton").budget.polish == "newton"


def test_tolerance_override_reaches_the_ask_of_both_benches():
    from tvbod.bench import cartpole_step
    from tvbod.core.behaviours import LEGACY_TOLERANCE
    from tvbod.core.optimize import TOLERANCE

    legacy = LEGACY_TOLERANCE["lbfgsb-joint"]
    assert cartpole_step.shipped_strategy(0).budget.tolerance == TOLERANCE
    assert cartpole_step.shipped_strategy(0, tolerance=legacy).budget.tolerance == legacy
    assert latency.build_strategy(2, 3).budget.tolerance == TOLERANCE
    assert latency.build_strategy(2, 3, tolerance=legacy).budget.tolerance == legacy


def test_compare_numpy_times_the_plain_step_on_the_same_data(tmp_path):
    proc = _run_module("--quick", "--dims", "2", "--sizes", "30", "--compare", "numpy",
                       "--polish", "newton", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert row["numpy_ms"]["p50"] > 0 and row["numpy_over_ask_tell"] > 0
    assert row["numpy_value_ratio"]["worst"] <= 1 + 1e-9
    assert row["numpy_value_ratio"]["worst"] > 0.99  # a real maximizer, not a random point
    assert "numpy/(ask+tell)" in proc.stdout and "(polish: newton, tolerance: 1e-05)" in proc.stdout
    assert "goal tell+ask <= 0.4x the plain numpy step at d=4 n=400: not measured" in proc.stdout


def test_compare_rejects_an_unknown_step():
    proc = _run_module("--quick", "--compare", "numpy,gpy")
    assert proc.returncode == 2 and "expected botorch, numpy or botorch,numpy" in proc.stderr


def _goal_result(ask: float, numpy: float | None, ratios: dict) -> dict:
    rows = []
    for d, worst in ratios.items():
        row = {"d": d, "n": 400, "ask_ms": {"p50": ask}, "tell_ms": {"p50": 0.5},
               "ask_value_ratio": {"median": 1.0, "worst": worst, "count": 5}}
        if numpy is not None:
            row.update(numpy_ms={"p50": numpy}, numpy_over_ask_tell=numpy / (ask + 0.5),
                       numpy_value_ratio={"median": 1.0, "worst": 0.999, "count": 5})
        rows.append(row)
    return {"rows": rows}


def test_goal_lines_say_met_missed_or_not_measured():
    from tvbod.bench.latency_goals import goal_lines

    met = goal_lines(_goal_result(2.5, 10.0, {4: 1.0, 8: 0.9995}))
    assert met[0] == "goal ask p50 <= 3 ms at d=4 n=400: met (2.50 ms; the lead measures it idle)"
    assert "BoTorch's step at d=4 n=400: not measured (--compare botorch)" in met[1]
    assert met[2] == "goal tell+ask <= 0.4x the plain numpy step at d=4 n=400: met (0.30x)"
    assert met[3].startswith("goal ask value/ref worst per d >= the compared steps' (within the "
                             "polish tolerance 1e-05): met; d=4 1")
    assert "d=8 1-5e-04" in met[3]  # the table's notation for gaps under 1e-3
    missed = goal_lines(_goal_result(3.5, 9.0, {4: 0.99}))
    assert [ln.split(": ")[1].split()[0] for ln in missed] == ["MISSED", "not", "MISSED", "MISSED;"]
    # "equal" is within the polish's tolerance: 2e-6 short of the compared step is equal at the
    # default 1e-5, and short at a run's tighter --tolerance
    close = _goal_result(3.5, 9.0, {4: 0.999 - 2e-6})
    assert goal_lines(close)[3].split(": ")[1].startswith("met")
    close["settings"] = {"tolerance": 1e-7}
    assert goal_lines(close)[3].split(": ")[1].startswith("MISSED")
    close["settings"] = {"tolerance": 0.0}  # 0 is a tolerance too, not "the default"
    assert "tolerance 0)" in goal_lines(close)[3] and "MISSED" in goal_lines(close)[3]
