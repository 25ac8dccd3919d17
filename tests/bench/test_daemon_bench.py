"""`tvbod bench daemon` drives a real daemon process and reports sane numbers."""

import subprocess
import sys

from tvbod.bench.daemon import format_table, run_case


def test_daemon_bench_measures_round_trips_without_errors():
    row = run_case(plants=3, transport="ipc", domain="arms", seconds=1.0, warmup=0.3, port=0)
    assert row["errors"] == 0
    assert row["messages_per_s"] > 10
    assert 0 < row["ask_p50_ms"] <= row["ask_p99_ms"]
    assert 0 < row["tell_p50_ms"] <= row["tell_p99_ms"]
    assert row["slowest_plant_steps_per_s"] > 0 and row["daemon_rss_mb_end"] > 10
    table = format_table([row])
    assert "msgs/s" in table.splitlines()[0] and len(table.splitlines()) == 2


def test_daemon_bench_cli_runs_over_tcp(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tvbod", "bench", "daemon", "--plants", "2",
                          "--transport", "tcp", "--port", "5733", "--seconds", "0.5",
                          "--warmup", "0.2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "results.json").exists()
    assert out.stdout.splitlines()[1].split()[:2] == ["2", "tcp"]


def test_the_daemon_benches_write_the_model_worker_kind_they_are_given(tmp_path):
    from tvbod.bench.daemon import _write_config
    from tvbod.service.config import load_daemon_config

    for kind in ("thread", "process"):
        root = tmp_path / kind
        _write_config(root, 2, "box", "ipc://{runtime_dir}/tvbod.sock", kind)
        config = load_daemon_config(root / "tvbod.yaml", env={"HOME": str(tmp_path)})
        assert config.model_worker_kind == kind and len(config.plants) == 2
