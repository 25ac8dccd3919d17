"""`tvbod bench events`: a real run through the command line, with real event files."""

import json
import subprocess
import sys


def test_bench_events_reports_a_rate_per_level_and_writes_every_event():
    proc = subprocess.run([sys.executable, "-m", "tvbod", "bench", "events", "--events", "400",
                           "--repeats", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert sorted(results) == ["debug", "info"]
    for r in results.values():
        assert r["file_lines"] == 400 and len(r["runs"]) == 2
        assert r["events_per_s"] == max(r["runs"]) > 0


def test_bench_events_prints_a_table():
    proc = subprocess.run([sys.executable, "-m", "tvbod", "bench", "events", "--events", "100",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[1].split() == ["log_level", "events/s", "stdout"]
    assert [r.split()[0] for r in rows[2:]] == ["info", "debug"]
