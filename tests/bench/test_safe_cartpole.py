"""`tvbod bench safe-cartpole`: the shipped safe plant file and its unsafe twin on the same seed."""

import subprocess
import sys

from tvbod.bench import safe_cartpole as sc


def test_the_safe_file_breaks_nothing_where_its_unsafe_twin_does():
    safe = sc.run_one((0, True, 30, 15))
    free = sc.run_one((0, False, 30, 15))
    assert safe["catastrophic"] == 0 and safe["violations"] == 0
    assert free["catastrophic"] >= 1  # the box holds gains that let the pole fall
    table = sc.summary([safe, free], 15).splitlines()
    assert len(table) == 4 and "| cartpole-safe.yaml | 1 | 0 (0) | 0 |" in table[2]


def test_the_cli_lists_the_bench():
    out = subprocess.run([sys.executable, "-m", "tvbod", "bench", "safe-cartpole", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--runs" in out.stdout
