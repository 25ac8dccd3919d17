"""`tvbod bench NAME` as a user runs it: a child process writing results.json to `<tmp>/out`."""

import json
import subprocess
import sys


def run_bench(tmp_path, name: str, *args, timeout: float = 300):
    """`(completed process, results.json)` of `python -m tvbod bench NAME ARGS --out tmp/out`;
    the bench must exit 0."""
    out = subprocess.run([sys.executable, "-m", "tvbod", "bench", name, *args,
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, json.loads((tmp_path / "out" / "results.json").read_text())
