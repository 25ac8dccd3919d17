"""A plant whose saved state cannot be restored is quarantined, not the daemon: the others are
served, its requests get `plant_unavailable`, `tvbod inspect` names it (exit 1) and `tvbod repair`
rebuilds it from its history, verified by replay (docs/reliability.md, Quarantine)."""

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
from daemon_harness import Daemon, objective
from upgrade_fixtures import copy_fixture

from plant_adapters.client import DaemonError


def _tvbod(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvbod", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


def _ask_error(d, plant):
    with d.client(plant, retries=0) as c:
        with pytest.raises(DaemonError) as err:
            c.ask()
    return err.value


def _steps(d, plant, n):
    with d.client(plant) as c:
        for _ in range(n):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))


@pytest.mark.parametrize("how", ["term", "kill"])
def test_a_poisoned_plant_from_0_2_0_is_quarantined_and_the_others_are_served(tmp_path, how):
    root = copy_fixture(f"poisoned-0.2.0/{how}", tmp_path)
    d = Daemon(root, existing=True).start()
    err = _ask_error(d, "alpha")
    assert err.code == "plant_unavailable" and "alpha" in str(err) and "repair" in str(err)
    assert "non-finite" in str(err) or "cannot be applied" in str(err)
    _steps(d, "beta", 3)  # the healthy plant goes on
    with d.client("beta") as c:
        status = c.status()
    assert [p["plant"] for p in status["plants"]] == ["beta"]
    assert set(status["daemon"]["quarantined"]) == {"alpha"}
    shown = _tvbod("status", "--config", str(root / "tvbod.yaml"))
    assert shown.returncode == 0 and "QUARANTINED alpha: " in shown.stdout, shown.stdout
    assert d.stop() == 0
    events = [e for e in d.log_events() if e["event"] == "plant_quarantined"]
    assert events and events[0]["plant"] == "alpha" and events[0]["level"] == "error"

    inspect = _tvbod("inspect", str(root / "state"), "--json")
    assert inspect.returncode == 1, inspect.stdout + inspect.stderr
    summaries = {s["plant"]: s for s in json.loads(inspect.stdout)}
    assert summaries["alpha"]["errors"] and not summaries["beta"]["errors"]
    assert "alpha cannot be restored" in inspect.stderr and "tvbod repair" in inspect.stderr
    replay = _tvbod("replay", str(root / "state" / "plants" / "alpha"))
    assert replay.returncode == 1 and "nothing verified" in replay.stderr, replay.stdout
    assert "non-finite" in replay.stderr and "verified:" not in replay.stdout


@pytest.mark.parametrize("how", ["term", "kill"])
def test_repair_rebuilds_up_to_the_first_refused_step_keeps_the_old_files_and_replays(tmp_path,
                                                                                      how):
    root = copy_fixture(f"poisoned-0.2.0/{how}", tmp_path)
    config = str(root / "tvbod.yaml")
    healthy = _tvbod("repair", "beta", "--config", config)
    assert healthy.returncode == 0 and "nothing to repair" in healthy.stdout, healthy.stderr
    dry = _tvbod("repair", "alpha", "--config", config, "--dry-run")
    assert dry.returncode == 0 and "dry run, nothing changed" in dry.stdout, dry.stderr
    assert not (root / "state" / "quarantine").exists()
    out = _tvbod("repair", "alpha", "--config", config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rebuilt 1 of 3 recorded steps" in out.stdout
    assert "left out steps 2..3" in out.stdout and "max_measurement_abs" in out.stdout
    kept = list((root / "state" / "quarantine").iterdir())
    assert len(kept) == 1 and (kept[0] / "events.jsonl").exists()  # the old files, untouched
    assert _tvbod("inspect", str(root / "state")).returncode == 0
    replay = _tvbod("replay", str(root / "state" / "plants" / "alpha"))
    assert replay.returncode == 0 and "verified: 1 steps" in replay.stdout, replay.stdout

    d = Daemon(root, existing=True).start()
    _steps(d, "alpha", 4)  # served again, from step 2 on
    with d.client("alpha") as c:
        assert c.status("alpha")["plants"][0]["t"] == 6
    assert d.stop() == 0
    replay = _tvbod("replay", str(root / "state" / "plants" / "alpha"))
    assert replay.returncode == 0 and "verified: 5 steps" in replay.stdout, replay.stdout


def test_repair_refuses_while_a_daemon_holds_the_state_directory(tmp_path):
    root = copy_fixture("poisoned-0.2.0/term", tmp_path)
    d = Daemon(root, existing=True).start()
    out = _tvbod("repair", "alpha", "--config", str(root / "tvbod.yaml"))
    assert out.returncode == 2 and "stop it first" in out.stderr
    assert not (root / "state" / "quarantine").exists()
    assert d.stop() == 0


def test_torn_checkpoints_repair_from_the_event_history_with_every_step(tmp_path):
    d = Daemon(tmp_path, plants={"alpha": {}, "beta": {}}, checkpoint_every=5).start()
    _steps(d, "alpha", 14)
    d.kill()
    plant = d.state / "plants" / "alpha"
    for name in ("checkpoint", "checkpoint.prev"):
        data = bytearray((plant / name).read_bytes())
        data[60] ^= 0xFF
        (plant / name).write_bytes(bytes(data))
    d.start()
    assert _ask_error(d, "alpha").code == "plant_unavailable"
    _steps(d, "beta", 2)
    assert d.stop() == 0
    out = _tvbod("repair", "alpha", "--config", str(tmp_path / "tvbod.yaml"))
    assert out.returncode == 0 and "rebuilt 14 of 14 recorded steps" in out.stdout, out.stderr
    d.start()
    _steps(d, "alpha", 2)
    assert d.stop() == 0
    replay = _tvbod("replay", str(plant))
    assert replay.returncode == 0 and "verified: 16 steps" in replay.stdout, replay.stdout


def test_a_quarantined_plant_is_a_metric_at_1_whose_series_go_with_the_plant(tmp_path):
    pytest.importorskip("prometheus_client")  # `make test` installs the metrics extra
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = copy_fixture("poisoned-0.2.0/term", tmp_path)
    (root / "tvbod.yaml").write_text((root / "tvbod.yaml").read_text()
                                     + f"metrics: {{port: {port}}}\n")
    d = Daemon(root, existing=True).start()

    def gauge(plant):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        line = [x for x in text.splitlines()
                if x.startswith(f'tvbod_plant_quarantined{{plant="{plant}"}}')]
        return float(line[0].split()[-1]) if line else None

    assert gauge("alpha") == 1.0
    (root / "plants" / "alpha.yaml").unlink()  # the operator removes the plant; a reload drops it
    d.proc.send_signal(signal.SIGHUP)
    import time

    deadline = time.monotonic() + 30
    while gauge("alpha") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gauge("alpha") is None and gauge("beta") == 0.0
    assert d.stop() == 0


def test_import_into_a_quarantined_plant_is_refused_with_the_reason(tmp_path):
    root = copy_fixture("poisoned-0.2.0/term", tmp_path)
    rows = tmp_path / "rows.csv"
    rows.write_text("t,kp,ki,measurement\n1,1.0,0.0,3.0\n")
    out = _tvbod("import", "alpha", str(rows), "--config", str(root / "tvbod.yaml"))
    assert out.returncode == 2 and "quarantined" in out.stderr and "non-finite" in out.stderr
    assert not (root / "state" / "quarantine").exists()
