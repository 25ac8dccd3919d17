"""`tvbod bench memory` (the daemon-memory goal) in a tiny
configuration: a real seeding through the daemon's code, a real daemon process over ZeroMQ, the
in-process breakdown in a fresh interpreter. No size assertions that depend on the machine: the
structure, positive numbers, and numbers that must agree with each other."""

import re

from tvbod.bench.memory import RSS_GOAL_MB, goal_line
from bench_cli import run_bench


def _bench(tmp_path, *args, timeout=600):
    return run_bench(tmp_path, "memory", *args, timeout=timeout)


def test_memory_bench_seeds_runs_a_daemon_and_accounts_for_every_plant(tmp_path):
    work = tmp_path / "work"
    out, res = _bench(tmp_path, "--box-plants", "2", "--box-n", "12", "--arms-plants", "2",
                      "--arms-n", "8", "--workdir", str(work))
    assert res["plants"] == 4
    assert set(res["seed"]["dataset_size"]) == {"box000", "box001", "arms000", "arms001"}
    assert all(1 <= n <= 12 for n in res["seed"]["dataset_size"].values())
    stages = res["breakdown"]["stages_rss_mb"]
    assert list(stages)[:4] == ["interpreter", "imports", "restored", "proposals"]
    assert all(v > 0 for v in stages.values()) and stages["imports"] > stages["interpreter"]
    plants = res["breakdown"]["plants"]
    assert {k: v["plants"] for k, v in plants.items()} == {"arms": 2, "box": 2}
    for kind in ("arms", "box"):
        lo, hi = plants[kind]["dataset_size"]
        arrays = plants[kind]["numpy_bytes_per_plant"]
        L = arrays.get("strategy.gp._L", 0) + arrays.get("strategy.gp._L_packed", 0)
        assert 4 * lo * (lo + 1) <= L <= 8 * hi * hi  # n x n float64, or its lower triangle
        assert plants[kind]["python_bytes_per_plant"]["told_replies"] > 0
    assert res["traced_mb"] > 0 and res["top_allocations"]
    assert all(re.fullmatch(r".+:\d+", a["where"]) and a["mb"] >= 0
               for a in res["top_allocations"])
    daemon = res["daemon"]
    assert daemon["complete"] and daemon["ready_s"] > 0
    assert 0 < daemon["ready"]["rss_mb"] <= daemon["peak_mb"]
    assert daemon["step"]["rss_mb"] <= daemon["step"]["hwm_mb"] <= daemon["peak_mb"]
    line = out.stdout.strip().splitlines()[-1]
    assert line == goal_line(res)
    m = re.fullmatch(r"daemon RSS <= 200 MB with 4 plants: (met|missed) \((\d+) MB, daemon peak\)",
                     line)
    assert m and int(m[2]) == round(daemon["peak_mb"])
    assert (m[1] == "met") == (daemon["peak_mb"] <= RSS_GOAL_MB)
    # the kept files are a state another run can start from (--seeded): no seeding then
    again, res2 = _bench(tmp_path / "again", "--box-plants", "2", "--box-n", "12",
                         "--arms-plants", "2", "--arms-n", "8", "--seeded", str(work),
                         "--no-breakdown")
    assert "seed" not in res2 and "breakdown" not in res2 and res2["daemon"]["complete"]
    assert again.stdout.strip().splitlines()[-1] == goal_line(res2)
