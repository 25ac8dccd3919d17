"""The adapters as real processes against a real daemon: progress, clean SIGINT stop, resume."""

import json
import signal
import subprocess
import sys
import textwrap

from daemon_harness import Daemon

from plant_adapters.client import DaemonClient


def _daemon_with_shipped_plants(tmp_path):
    d = Daemon(tmp_path)
    (tmp_path / "plants" / "alpha.yaml").unlink()
    repo_plants = (__import__("pathlib").Path(__file__).resolve().parents[2] / "configs" / "plants")
    (tmp_path / "tvbod.yaml").write_text(textwrap.dedent(f"""\
        endpoints: ["ipc://{{runtime_dir}}/tvbod.sock"]
        runtime_dir: ./run
        state_dir: ./state
        log_format: json
        plants: "{repo_plants}/*.yaml"
        """))
    return d


def test_cartpole_adapter_stops_cleanly_on_sigint_and_resumes(tmp_path):
    d = _daemon_with_shipped_plants(tmp_path)
    d.start()  # waits until the daemon answers a ping
    records = tmp_path / "cart.jsonl"
    cmd = [sys.executable, "-m", "plant_adapters.cartpole", "--endpoint", d.endpoint,
           "--steps", "200", "--out", str(records)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[cartpole] t=10 "):
            proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, "".join(lines)
    assert any("stopping after this step" in l for l in lines)
    told = [json.loads(l)["t"] for l in records.read_text().splitlines()]
    with DaemonClient(d.endpoint, "cartpole") as c:
        status = c.status("cartpole")["plants"][0]
    assert status["tells"] == len(told) and status["pending"] is None  # the step in hand was told
    assert told == list(range(1, len(told) + 1))

    # a second run continues from the daemon's step, not from 1
    again = subprocess.run(cmd[:-4] + ["--steps", str(len(told) + 3), "--out", str(records)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"next step {len(told) + 1}" in again.stdout
    told = [json.loads(l)["t"] for l in records.read_text().splitlines()]
    assert told == list(range(1, len(told) + 1)) and told[-1] == told[0] + len(told) - 1
    assert d.stop() == 0


def test_temperature_adapter_reports_regret_against_the_hottest_sensor(tmp_path):
    d = _daemon_with_shipped_plants(tmp_path)
    d.start()  # waits until the daemon answers a ping
    out = subprocess.run([sys.executable, "-m", "plant_adapters.temperature", "--endpoint",
                          d.endpoint, "--steps", "12"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    steps = [l for l in out.stdout.splitlines() if l.startswith("[temperature] t=")]
    assert len(steps) == 12 and all("sensor=" in l and "regret" in l for l in steps)
    assert d.stop() == 0


def test_adapter_refuses_unknown_settings_keys(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text("endpoint: ipc:///nowhere\nfrction: {}\n")
    out = subprocess.run([sys.executable, "-m", "plant_adapters.cartpole", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "unknown keys ['frction']" in out.stderr
