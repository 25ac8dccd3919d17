"""The adapters as real processes against a real daemon: progress, clean SIGINT stop, resume,
`--steps N` as N more steps on kept state, `--until T` as an absolute horizon, and a run with
nothing to do that says so and exits 3."""

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

    # a second run continues from the daemon's step, not from 1, for 3 more steps
    first = len(told)
    again = subprocess.run(cmd[:-4] + ["--steps", "3", "--out", str(records)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"next step {first + 1}, steps {first + 1}..{first + 3}" in again.stdout
    told = [json.loads(l)["t"] for l in records.read_text().splitlines()]
    assert told == list(range(1, first + 4))
    assert d.stop() == 0


def _cartpole(d, *flags):
    return subprocess.run([sys.executable, "-m", "plant_adapters.cartpole", "--endpoint",
                           d.endpoint, *flags], capture_output=True, text=True, timeout=120)


def _steps_run(r) -> list[int]:
    return [int(l.split()[1][2:]) for l in r.stdout.splitlines() if l.startswith("[cartpole] t=")]


def test_steps_counts_from_where_the_kept_plant_is_and_until_is_absolute(tmp_path):
    d = _daemon_with_shipped_plants(tmp_path)
    d.start()
    runs = [_cartpole(d, "--steps", "4") for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stdout + r.stderr for r in runs]
    assert [_steps_run(r) for r in runs] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert "next step 5, steps 5..8" in runs[1].stdout
    up_to = _cartpole(d, "--until", "10")
    assert up_to.returncode == 0, up_to.stdout + up_to.stderr
    assert _steps_run(up_to) == [9, 10]
    with DaemonClient(d.endpoint, "cartpole") as c:
        assert c.status("cartpole")["plants"][0]["tells"] == 10
    assert d.stop() == 0


def test_an_adapter_with_nothing_to_do_says_so_and_exits_3(tmp_path):
    d = _daemon_with_shipped_plants(tmp_path)
    d.start()
    assert _cartpole(d, "--steps", "3").returncode == 0
    for flags in (["--until", "3"], ["--until", "2"]):
        r = _cartpole(d, *flags)
        assert r.returncode == 3, r.stdout + r.stderr
        assert _steps_run(r) == [] and r.stderr.count("\n") == 1
        assert "nothing to do: the plant has done 3 steps" in r.stderr
        assert f"horizon (--until / until:) {flags[1]} is reached" in r.stderr
    # the same from a settings file's `until:`, the key the shipped files and the units use
    settings = _settings(tmp_path, f"endpoint: {d.endpoint}\nuntil: 3\n")
    r = subprocess.run([sys.executable, "-m", "plant_adapters.cartpole", "--config",
                        str(settings)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "nothing to do" in r.stderr, r.stdout + r.stderr
    with DaemonClient(d.endpoint, "cartpole") as c:
        status = c.status("cartpole")["plants"][0]
    assert status["tells"] == 3 and status["pending"] is None  # nothing was asked
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


def test_temperature_adapter_stops_where_its_data_ends_and_then_has_nothing_to_do(tmp_path):
    d = _daemon_with_shipped_plants(tmp_path)
    d.start()
    base = [sys.executable, "-m", "plant_adapters.temperature", "--endpoint", d.endpoint]
    first = subprocess.run(base + ["--until", "94"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    last = subprocess.run(base + ["--steps", "5"], capture_output=True, text=True, timeout=120)
    assert last.returncode == 0, last.stderr
    assert "next step 95, steps 95..96 (where its data ends)" in last.stdout
    assert [l.split()[1] for l in last.stdout.splitlines() if " t=" in l] == ["t=95", "t=96"]
    more = subprocess.run(base + ["--steps", "1"], capture_output=True, text=True, timeout=120)
    assert more.returncode == 3 and more.stderr.count("\n") == 1, more.stdout + more.stderr
    assert "the plant has done 96 steps and the data ends at step 96" in more.stderr
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
        "give steps (N more) or until (step T), not both": [
            "plant_adapters.cartpole", "--config", str(_horizon(tmp_path, "steps: 3\nuntil: 9\n"))],
        "until must be a positive whole number of steps, got 0": [
            "plant_adapters.cartpole", "--config", str(_horizon(tmp_path, "until: 0\n"))],
    }
    for needle, argv in cases.items():
        r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (needle, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1, (needle, r.stderr)
        assert needle in r.stderr or needle == "unreadable", (needle, r.stderr)


def test_steps_and_until_together_or_not_positive_are_usage_errors(tmp_path):
    for flags, needle in [(["--steps", "3", "--until", "9"], "not allowed with argument"),
                          (["--steps", "0"], "0 is not a positive number of steps"),
                          (["--until", "x"], "'x' is not a whole number")]:
        r = subprocess.run([sys.executable, "-m", "plant_adapters.cartpole", "--endpoint",
                            "ipc:///nowhere", *flags], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and needle in r.stderr, (flags, r.stderr)


def _settings(tmp_path, text):
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def _horizon(tmp_path, text):
    path = tmp_path / f"horizon-{abs(hash(text))}.yaml"
    path.write_text("endpoint: ipc:///nowhere\n" + text)
    return path
