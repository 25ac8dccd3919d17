"""`make demo` as shipped (`tvbod demo` on its defaults: the cart-pole's friction jump at t = 100 of
300 steps, 96 temperature steps) leaves an operator at most three warnings per plant to read,
resets included: every warning says something the operator can act on."""

import subprocess
import sys
from collections import Counter

from tvbod.service.event_files import read_events

MAX_WARNINGS = 3


def test_the_demo_on_its_defaults_emits_at_most_three_warnings_per_plant(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "tvbod", "demo", "--quiet", "--out", str(run_dir)],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for plant in ("cartpole", "cartpole-safe", "temperature"):
        events = read_events(run_dir / "state" / "plants" / plant / "events.jsonl")
        warnings = [e for e in events if e.get("level") in ("warning", "error")]
        kinds = Counter(e["event"] for e in warnings)
        assert len(warnings) <= MAX_WARNINGS, (plant, kinds, [e.get("t") for e in warnings])
        assert kinds["measurement_out_of_range"] <= 1 + kinds["reset"], (plant, kinds)
