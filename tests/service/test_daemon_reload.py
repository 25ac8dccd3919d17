"""SIGHUP reloads the plant files: plants appear and disappear, allowed optimizer changes keep the
data, invalid or data-incompatible configurations are refused while the old one keeps running."""

import signal
import subprocess
import sys
import time

import pytest
from daemon_harness import Daemon, objective, plant_yaml

from plant_adapters.client import DaemonError


def _session(client, steps):
    for _ in range(steps):
        p = client.ask()
        client.tell(p["proposal_id"], objective(p["gains"], p["t"]))


def _hup_and_wait(d, event):
    """The daemon-wide `event` after a SIGHUP (a plant's own `config_reloaded`, which comes
    first, is not the one: a loaded machine may show it alone for a while)."""
    def daemon_events():
        return [e for e in d.log_events() if e["event"] == event and "plant" not in e]

    before = len(daemon_events())
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = daemon_events()
        if len(events) > before:
            return events[-1]
        time.sleep(0.05)
    raise AssertionError(f"no {event} after SIGHUP:\n{d.log.read_text()[-2000:]}")


def _status(d, plant="alpha"):
    with d.client(plant) as c:
        return c.status(plant)["plants"][0]


def _plant_file(d, name="alpha", **kw):
    return plant_yaml(name, **kw)


def test_sighup_adds_and_removes_plants(tmp_path):
    d = Daemon(tmp_path).start()
    with d.client() as c:
        _session(c, 4)
    (tmp_path / "plants" / "gamma.yaml").write_text(_plant_file(d, "gamma", seed=5))
    ev = _hup_and_wait(d, "config_reloaded")
    assert ev["added"] == ["gamma"] and ev["removed"] == []
    with d.client("gamma") as c:
        assert c.hello()["plant"] == "gamma"
        _session(c, 2)
    (tmp_path / "plants" / "alpha.yaml").unlink()
    ev = _hup_and_wait(d, "config_reloaded")
    assert ev["removed"] == ["alpha"]
    with d.client("alpha") as c, pytest.raises(DaemonError) as err:
        c.ask()
    assert err.value.code == "unknown_plant"
    assert any(e["event"] == "plant_removed" for e in d.events("alpha"))
    assert _status(d, "gamma")["t"] == 3
    assert d.stop() == 0


def test_allowed_change_keeps_the_data_and_replay_follows_it(tmp_path):
    d = Daemon(tmp_path).start()
    with d.client() as c:
        _session(c, 8)
        c.ask()  # a proposal issued under the old settings stays valid across the reload
    before = _status(d)
    path = tmp_path / "plants" / "alpha.yaml"
    path.write_text(path.read_text().replace("noise_variance: 0.01", "noise_variance: 0.01\n  delta_b: 0.3"))
    ev = _hup_and_wait(d, "config_reloaded")
    assert list(ev["changed"]) == ["alpha"] and "delta_b" in ev["changed"]["alpha"]
    after = _status(d)
    assert (after["t"], after["dataset_size"], after["pending"]) == (
        before["t"], before["dataset_size"], before["pending"])
    with d.client() as c:
        p = c.ask()
        assert p["proposal_id"] == before["pending"]["proposal_id"]
        c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
        _session(c, 8)
    assert d.stop() == 0
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "17 steps reproduced exactly" in out.stdout, out.stdout + out.stderr


def test_invalid_new_config_is_refused_and_the_old_one_keeps_running(tmp_path):
    d = Daemon(tmp_path).start()
    with d.client() as c:
        _session(c, 3)
    path = tmp_path / "plants" / "alpha.yaml"
    good = path.read_text()
    path.write_text(good.replace("lengthscales: 0.3", "lengthscales: -1"))
    ev = _hup_and_wait(d, "config_reload_failed")
    assert "optimizer.kernel.lengthscales" in ev["error"]
    assert _status(d)["t"] == 4
    path.write_text(good.replace("upper: 2.0", "upper: 3.0"))  # bounds: the data would change meaning
    ev = _hup_and_wait(d, "config_reload_failed")
    assert "optimizer.domain" in ev["error"] and "alpha" in ev["error"]
    with d.client() as c:
        assert c.hello()["parameters"][0]["upper"] == 2.0
        _session(c, 1)
    assert d.stop() == 0


def test_restart_with_a_changed_config_keeps_allowed_changes_and_quarantines_the_rest(tmp_path):
    d = Daemon(tmp_path).start()
    with d.client() as c:
        _session(c, 6)
    assert d.stop() == 0
    path = tmp_path / "plants" / "alpha.yaml"
    good = path.read_text()
    path.write_text(good.replace("seed: 1", "seed: 9"))
    d.start()
    with d.client() as c:
        assert c.status("alpha")["plants"][0]["t"] == 7
        _session(c, 5)
    assert d.stop() == 0
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "11 steps reproduced exactly" in out.stdout, out.stdout + out.stderr
    path.write_text(good.replace("sense: minimize", "sense: maximize"))
    d.start()  # the plant whose stored data the new file cannot read is quarantined
    with d.client(retries=0) as c:
        with pytest.raises(DaemonError) as err:
            c.ask()
    assert err.value.code == "plant_unavailable" and "optimizer.sense" in str(err.value)
    path.write_text(good)  # the old file back, and a reload serves the plant again
    _hup_and_wait(d, "config_reloaded")
    assert _status(d)["t"] == 12
    assert d.stop() == 0


def test_reload_of_an_unchanged_file_with_log_format_auto_requires_no_restart(tmp_path):
    d = Daemon(tmp_path)
    conf = d.root / "tvbod.yaml"
    conf.write_text(conf.read_text().replace("log_format: json", "log_format: auto"))
    d.start()
    event = _hup_and_wait(d, "config_reloaded")
    assert event["restart_required_for"] == [] and event["changed"] == {}
    assert d.stop() == 0


def test_restart_from_a_fixed_to_a_learned_forgetting_floor_learns_it_and_replays(tmp_path):
    # The shipped temperature file's change of this release (forgetting_floor 0.02 -> auto) on a
    # box plant whose objective jumps: the history before the restart replays under 0.02, the
    # steps after it under the rate learned from the restored dataset.
    d = Daemon(tmp_path, plants={"alpha": {"extra": "  forgetting_floor: 0.02\n"}}).start()
    with d.client() as c:
        _session(c, 12)
    assert d.stop() == 0
    path = tmp_path / "plants" / "alpha.yaml"
    path.write_text(path.read_text().replace("forgetting_floor: 0.02", "forgetting_floor: auto"))
    d.start()
    with d.client() as c:
        assert c.status("alpha")["plants"][0]["t"] == 13
        _session(c, 10)
    assert d.stop() == 0
    reloaded = [e for e in d.events("alpha") if e["event"] == "config_reloaded"]
    assert reloaded and "forgetting_floor" in reloaded[-1]["changed"]
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "22 steps reproduced exactly" in out.stdout, out.stdout + out.stderr
