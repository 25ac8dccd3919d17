"""`tvbod bench suite`: the `--quick` grid end to end in a child process (results.json and the
tables agree with runs.jsonl, a rerun resumes), the dev / held-out split, the plants' contract."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvbod.bench import plant_runs as pr
from tvbod.bench.suite import algorithms as al
from tvbod.bench.suite import plants as pl
from tvbod.bench.suite import run as suite
from tvbod.bench.suite.plant import Drift

ROOT = Path(__file__).resolve().parents[2]


def _suite(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tvbod", "bench", "suite", "--quick", "--workers",
                           "1", "--out", str(out)], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    proc = _suite(out)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_quick_grid_results_match_the_recorded_runs(quick):
    out, proc = quick
    doc = json.loads((out / "results.json").read_text())
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    q = suite.QUICK
    assert len(runs) == len(q["plants"]) * len(q["drifts"]) * len(q["algorithms"]) * q["runs"]
    assert len(doc["cells"]) == len(runs) // q["runs"]
    for c in doc["cells"]:
        mine = [r for r in runs if (r["plant"], r["drift"], r["label"]) ==
                (c["plant"], c["drift"], c["label"])]
        assert len(mine) == c["runs"] == q["runs"]
        totals = [sum(r["regret"]) for r in sorted(mine, key=lambda r: r["run"])]
        assert c["R_T_mean"] == pytest.approx(np.mean(totals), rel=1e-6)
        if c["strategy"] == "et-gp-ucb":
            assert c["max_resets"] == max(len(r["reset_times"]) for r in mine)
        else:  # reset statistics are the trigger's: none for GP-UCB
            assert c["max_resets"] is None and c["false_reset_runs"] is None
        assert c["catastrophic"] == sum(r["catastrophic"] for r in mine)
        assert c["distinct_trajectories"] == len({r["trajectory"] for r in mine})
        assert all(len(r["regret"]) == q["horizon"] for r in mine)
        if c["drift"] == "none" and c["strategy"] == "et-gp-ucb":  # every reset is a false one
            assert c["false_reset_runs"] == sum(1 for r in mine if r["reset_times"])
        # The table row carries the cell's mean regret.
        assert f"| {c['plant']} | {c['drift']} | {c['label']} | {c['R_T_mean']:.2f} [" in \
            doc["tables"][pl.split_of(c["plant"])]
    tables = (out / "tables.md").read_text()
    for split in ("dev", "held-out"):
        assert f"**Split: {split}**" in doc["tables"][split] and doc["tables"][split] in tables
        assert doc["tables"][split] in proc.stdout
    # dev and held-out apart: no held-out plant in the dev table, and the reverse.
    assert "| ackley4 |" not in doc["tables"]["dev"] and "| hartmann3 |" not in \
        doc["tables"]["held-out"]


def test_a_rerun_resumes_every_recorded_task(quick):
    out, _ = quick
    before = (out / "runs.jsonl").read_text()
    proc = _suite(out)
    assert proc.returncode == 0, proc.stderr
    n = len(before.splitlines())
    assert f"resuming: {n} of {n} tasks already in" in proc.stderr
    assert "[suite] 0 tasks on" in proc.stderr
    assert (out / "runs.jsonl").read_text() == before  # nothing re-run, nothing appended


def test_the_split_table_printed_is_the_code_s(quick):
    out, proc = quick
    doc = json.loads((out / "results.json").read_text())
    printed = {r["plant"]: r["split"] for r in doc["split"]}
    assert printed == {**pl.SPLIT, **{n: pl.split_of(n) for n in pl.names()}}
    for name, split in pl.SPLIT.items():
        assert f"| {name} | {split} |" in proc.stdout
    assert {pl.split_of(n) for n in ("cartpole", "hartmann3", "dc-motor")} == {"dev"}
    assert {pl.split_of(n) for n in ("temperature", "ackley4")} == {"held-out"}
    assert pl.split_of("tc-cartpole-4d-lqr") == "held-out"  # the TuneControl family
    with pytest.raises(KeyError):
        pl.split_of("no-such-plant")


@pytest.mark.parametrize("name", ["cartpole", "dc-motor", "hartmann3", "ackley4", "temperature"])
def test_a_plant_s_best_cost_is_at_or_below_every_cost_in_its_box(name):
    # Regret is never negative in expectation: the best cost is a lower bound of the noise-free
    # cost at Sobol points of the box, before and after the largest change the plant has.
    p = pl.plant(name)
    rng = np.random.default_rng(0)
    kind = "two-jumps" if "two-jumps" in p.drifts else p.drifts[-1]
    for t, drift in ((1, Drift()), (250, Drift(kind))):
        if drift.kind == "none" and "none" not in p.drifts:
            continue
        X = p.lower + rng.random((64, len(p.lower))) * (p.upper - p.lower)
        if hasattr(p, "arms"):
            X = np.arange(p.arms)[:, None]
        best = p.best_cost(t, drift)
        assert all(p.cost(x, t, drift) >= best - 1e-9 for x in X)


def test_a_physical_drift_moves_the_optimum_and_the_cost():
    # The DC motor's inertia and the cart-pole's friction change what the best gains cost.
    for name in ("dc-motor", "cartpole"):
        p = pl.plant(name)
        before = p.best_cost(1, Drift("jump-large", at=10))
        after = p.best_cost(10, Drift("jump-large", at=10))
        small = p.best_cost(10, Drift("jump-small", at=10))
        assert before < small < after


def test_temperature_runs_differ_beyond_their_first_proposal():
    # Two runs that propose the same sensors see different readings: the start offset into the
    # data and the sensor noise come from the run's seed.
    p = pl.plant("temperature")
    a, b = p.for_run(pr.run_seed(0, 0)), p.for_run(pr.run_seed(0, 1))
    assert a.start != b.start
    ya = [a.episode(np.array([3]), t, Drift("periodic"), np.random.default_rng([1, t]))
          for t in range(1, 20)]
    yb = [b.episode(np.array([3]), t, Drift("periodic"), np.random.default_rng([2, t]))
          for t in range(1, 20)]
    assert not np.allclose(ya, yb)


def test_an_oracle_best_at_the_grid_s_edge_is_flagged():
    rows = dict((a.label, a) for a, role in al.rows(("oracle",), 300) if role == "oracle")
    assert al.on_grid_edge(rows[f"TV-GP-UCB (eps={al.GRID_EPS[0]:g})"])
    assert not al.on_grid_edge(rows[f"TV-GP-UCB (eps={al.GRID_EPS[2]:g})"])
    assert al.on_grid_edge(rows[f"R-GP-UCB (N={al.GRID_PERIODS[-1]})"])


def test_mean_interval_is_student_t():
    from tvbod.bench.suite.report import mean_ci

    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.302652729911275 / math.sqrt(3))
    assert math.isnan(mean_ci([1.0])[1])


def test_the_safe_rows_run_only_where_a_plant_has_unsafe_gains():
    assert al.applies(al.SAFE_ET, pl.plant("dc-motor")) and al.applies(al.SAFE_GP, pl.plant("cartpole"))
    assert not al.applies(al.SAFE_ET, pl.plant("hartmann3"))  # no catastrophe, no safe row
    assert not al.applies(al.SAFE_ET, pl.plant("temperature"))  # arms
    s = al.safety_for("dc-motor")
    p = pl.plant("dc-motor")
    centre = (p.lower + p.upper) / 2
    assert s["safe_seeds"] == [centre.tolist()]
    assert s["max_cost"] >= 1.1 * p.cost(centre, 1, Drift())
    assert np.mean(al.nominal_costs("dc-motor") > s["max_cost"]) == pytest.approx(0.1, abs=0.01)


def test_a_safe_row_counts_violations_and_tells_a_catastrophe_as_a_failure():
    cfg = suite.Config(40, al.QUICK)
    safe = suite.run_task("dc-motor", "jump-large", al.SAFE_ET, 0, 0, cfg)
    free = suite.run_task("dc-motor", "jump-large", al.BOUNDS_ONLY, 0, 0, cfg)
    assert safe["violations"] is not None and free["violations"] is not None
    assert safe["catastrophic"] <= safe["violations"] <= 40
    m = al.spec(pl.plant("dc-motor"), al.SAFE_GP, 3, 40, al.QUICK)
    assert m["strategy"] == "gp-ucb" and m["safety"] == al.safety_for("dc-motor")
    assert "trigger" not in m
