"""`tvbod bench startup`: real daemons started to READY for every case, then stopped."""

import json
import subprocess
import sys

import numpy as np
import yaml

from tvbod.bench import startup
from tvbod.service.config import load_plant_config


def test_every_case_reaches_ready_and_the_import_times_are_reported():
    proc = subprocess.run([sys.executable, "-m", "tvbod", "bench", "startup", "--plants", "2",
                           "--repeats", "1", "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert sorted(results["cases"]) == sorted(startup.CASES)
    for case, r in results["cases"].items():
        assert r["runs"][0]["error"] is None and r["median_s"] > 0, case
    assert results["cases"]["inline"]["plant_bytes"] > 2 * 50_000  # two ~55 KB plant files
    assert results["cases"]["side-file"]["plant_bytes"] < 2 * 1_000
    assert all(ms > 0 for ms in results["imports_ms"].values())
    assert "[startup] shipped 1/1:" in proc.stderr  # progress while it runs


def test_inline_and_side_file_trees_hold_the_same_plants(tmp_path):
    inline = startup.write_arms_tree(tmp_path / "inline", 2, side_file=False)
    side = startup.write_arms_tree(tmp_path / "side", 2, side_file=True)
    for name in ("arms000", "arms001"):
        a = load_plant_config(inline.parent / "plants" / f"{name}.yaml")
        b = load_plant_config(side.parent / "plants" / f"{name}.yaml")
        assert a.fingerprint == b.fingerprint  # repr() keeps every bit of the inline matrix
        assert np.linalg.eigvalsh(np.array(a.optimizer.kernel.matrix))[0] > 0
    text = (inline.parent / "plants" / "arms000.yaml").read_text()
    assert len(yaml.safe_load(text)["optimizer"]["kernel"]["matrix"]) == startup.ARMS
