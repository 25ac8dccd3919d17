"""`tvbod bench stopping-time`: tau is the within-model benchmark's first reset on the same draw,
R-GP-UCB's N, the summary statistics, the CLI end to end."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from tvbod.bench import stopping_time as st
from tvbod.bench import within_model as wm


def test_reset_period_is_the_papers_formula():
    assert st.reset_period(0.03) == 29 == wm.RESET_PERIODS[0.03]  # ceil(12 / 0.03^(1/4))
    assert st.reset_period(0.1) == 22
    assert st.reset_period(0.01) == wm.RESET_PERIODS[0.01] and st.reset_period(0.05) == 26
    assert st.reset_period(1e-12, horizon=200) == 200  # capped at T


@pytest.mark.parametrize("eps", [0.03, 0.1])
def test_tau_is_the_first_reset_of_the_within_model_run_on_the_same_draw(eps):
    # Property: stopping at the first activation changes nothing before it.
    horizon, grid = 60, 10
    for run in range(3):
        full = wm.run_task(eps, run, 0, horizon, (wm.PAPER_ET_ALGO, wm.ROBUST_ET_ALGO), grid)
        tau = st.run_task(eps, run, 0, horizon, grid)["tau"]
        for name, algo in st.TRIGGERS.items():
            resets = full["results"][algo.key]["reset_times"]
            assert tau[name] == (resets[0] if resets else None)


def test_summary_statistics_and_histogram():
    taus = [(3, 5), (7, None), (None, 2), (11, 4)]
    results = [{"eps": 0.1, "run": i, "tau": {"paper": p, "robust": r}}
               for i, (p, r) in enumerate(taus)]
    paper, robust = st.summarize(results, (0.1,), horizon=12)
    assert (paper["trigger"], paper["runs"], paper["activated"], paper["no_activation"]) == (
        "paper", 4, 3, 1)
    assert paper["mean"] == 7.0 and paper["median"] == 7.0 and paper["quantiles"]["0.5"] == 7.0
    assert paper["counts"][2] == paper["counts"][6] == paper["counts"][10] == 1
    assert sum(paper["counts"]) == 3 and len(paper["counts"]) == 12
    assert paper["N"] == 12  # min(T, 12 eps^(-1/4) = 21.3)
    assert paper["share_before_N"] == 1.0 and robust["median"] == 4.0
    table = st.format_table([paper, robust], 12)
    assert "| paper | 0.1 | 4 | 1 | 7.0 +- 3.3 | 7 |" in table


def test_cli_end_to_end_with_plot(tmp_path, capsys):
    from tvbod.commands import build_parser

    args = build_parser().parse_args(["bench", "stopping-time", "--runs", "3", "--grid", "8",
                                      "--horizon", "40", "--eps", "0.1", "--workers", "1",
                                      "--out", str(tmp_path)])
    assert st.run(args) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [(s["trigger"], s["eps"], s["runs"]) for s in doc["summary"]] == [
        ("paper", 0.1, 3), ("robust", 0.1, 3)]
    for s in doc["summary"]:
        hit = [t for t in s["taus"] if t is not None]
        assert s["activated"] == len(hit) and all(1 <= t <= 40 for t in hit)
        assert np.sum(s["counts"]) == len(hit)
    assert (tmp_path / "stopping-time.png").stat().st_size > 0
    assert "R-GP-UCB N" in capsys.readouterr().out


def test_cli_defaults_are_the_papers_study():
    p = argparse.ArgumentParser()
    st.add_arguments(p)
    a = p.parse_args([])
    assert (a.runs, a.eps, a.horizon, a.grid, a.workers, a.scheduler) == (
        30_000, (0.03, 0.1), 200, 50, 2, None)
    with pytest.raises(SystemExit):
        p.parse_args(["--eps", "0.1,2"])
