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


def test_adapter_says_where_it_waits_at_once_and_counts_its_retries_down(tmp_path):
    endpoint = f"ipc://{tmp_path}/nobody.sock"
    proc = subprocess.Popen([sys.executable, "-m", "plant_adapters.cartpole", "--endpoint", endpoint,
                             "--timeout", "0.5", "--retries", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()  # printed before the first try, not after the silence
    assert first == f"[cartpole] waiting for the daemon at {endpoint}\n"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    retries = [l for l in out.splitlines() if "no answer from" in l]
    assert [l.split("retrying, ")[1].split(" retries")[0] for l in retries] == ["2 of 2", "1 of 2"]
    assert "gives up in about 1 s" in retries[0]
    assert err.count("\n") == 1 and "the daemon does not answer" in err


def test_adapter_usage_and_settings_errors_exit_2_with_one_line(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("endpoint: [unclosed\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("endpoint: ipc:///nowhere\nfrction: {}\n")
    cases = {
        "no endpoint": ["plant_adapters.cartpole"],
        "unreadable": ["plant_adapters.temperature", "--config", str(tmp_path / "missing.yaml")],
        "cannot read the adapter settings": ["plant_adapters.cartpole", "--config", str(bad_yaml)],
        "unknown keys ['frction']": ["plant_adapters.cartpole", "--config", str(unknown)],
        "data_dir": ["plant_adapters.temperature", "--endpoint", "ipc:///nowhere", "--config",
                     str(_settings(tmp_path, "data_dir: /nonexistent\n"))],
    }
    for needle, argv in cases.items():
        r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (needle, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1, (needle, r.stderr)
        assert needle in r.stderr or needle == "unreadable", (needle, r.stderr)


def _settings(tmp_path, text):
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path
