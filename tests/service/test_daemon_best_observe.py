"""The optional v1 requests against a real daemon: `best` (the recommendation, also in `status`
and `tvbod best`) and `observe` (a measurement taken elsewhere, journaled like a tell)."""

import math
import subprocess
import sys

import numpy as np
import pytest
from daemon_harness import Daemon, objective

from plant_adapters.client import DaemonError
from tvbod.core import make_strategy
from tvbod.commands.replay import load_history, recorded_optimizer

GAINS = {"kp": 1.0, "ki": 0.2}


def _drive(client, steps):
    for _ in range(steps):
        p = client.ask()
        client.tell(p["proposal_id"], objective(p["gains"], p["t"]))


def _best_cli(d, plant, *extra):
    return subprocess.run([sys.executable, "-m", "tvbod", "best", plant, "--endpoint", d.endpoint,
                           *extra], capture_output=True, text=True, timeout=60)


def test_best_is_the_posterior_mean_minimizer_over_the_measured_points(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        c = d.client("alpha")
        empty = c.best()
        assert empty["gains"] is None and empty["dataset_size"] == 0 and empty["t"] == 1
        r = _best_cli(d, "alpha")
        assert r.returncode == 2 and "no data yet" in r.stderr and r.stdout == ""
        _drive(c, 8)
        best = c.best()
        status = c.status("alpha")["plants"][0]
        cli = _best_cli(d, "alpha")
    finally:
        assert d.stop() == 0
    assert best["t"] == 9 and best["dataset_size"] == 8 and best["sense"] == "minimize"
    assert status["best"] == {k: v for k, v in best.items() if k not in ("v", "id", "ok", "type")}
    assert cli.returncode == 0 and "alpha at t=9 (|D|=8, minimize): deploy kp=" in cli.stdout
    # Independently: rebuild the optimizer from the recorded history and minimize its posterior
    # mean over the measured points by brute force.
    history = load_history(d.state / "plants" / "alpha")
    s = make_strategy(recorded_optimizer(d.state / "plants" / "alpha", None))
    for e in history:
        s.tell(np.asarray(e["x"]), e["measurement"])
    means = [s.predict(np.asarray(e["x"]))[0] for e in history]
    i = int(np.argmin(means))
    assert best["gains"] == history[i]["gains"] and best["measured_at"] == history[i]["t"]
    assert math.isclose(best["mean"], means[i], rel_tol=1e-9)
    assert math.isclose(best["std"], s.predict(np.asarray(history[i]["x"]))[1], rel_tol=1e-6)


def test_best_of_an_unknown_plant_is_one_line_and_exit_2(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        with pytest.raises(DaemonError) as err:
            d.client("nope").best()
        r = _best_cli(d, "nope")
        bad = _best_cli(d, "../x")
    finally:
        d.stop()
    assert err.value.code == "unknown_plant"
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no plant named 'nope'" in r.stderr
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_best_without_a_daemon_exits_1(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tvbod", "best", "alpha", "--endpoint",
                        f"ipc://{tmp_path}/none.sock", "--timeout", "0.2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no reply" in r.stderr


def test_observe_is_a_step_journaled_like_a_tell_and_survives_a_kill(tmp_path):
    d = Daemon(tmp_path).start()
    c = d.client("alpha", adapter="lab")
    _drive(c, 3)
    reply = c.observe(GAINS, 0.75, metadata={"source": "bench"})
    assert reply["t"] == 4 and reply["dataset_size"] == 4 and reply["duplicate"] is False
    again = c.request("observe", reply["id"], plant="alpha", gains=GAINS, measurement=0.75)
    assert again["duplicate"] is True and again["t"] == 4
    assert c.ask()["t"] == 5  # the next proposal comes after the observation
    d.kill()  # the observation was acknowledged, hence journaled: a SIGKILL keeps it
    d.start()
    try:
        c = d.client("alpha", adapter="lab")
        hello = c.hello()
        assert hello["t"] == 5 and hello["pending"]["t"] == 5
        p = hello["pending"]
        c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    finally:
        assert d.stop() == 0
    observed = [e for e in d.events() if e["event"] == "measurement" and e.get("observed")]
    assert {e["proposal_id"] for e in observed} == {"alpha:4.observed"}
    assert observed[0]["gains"] == GAINS and observed[0]["measurement"] == 0.75
    r = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(d.state / "plants" / "alpha")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "verified: 5 steps reproduced exactly" in r.stdout, r.stdout + r.stderr


BAD = [
    ({"plant": "nope", "gains": GAINS, "measurement": 1.0}, "unknown_plant"),
    ({"plant": "alpha", "gains": {"kp": 1.0}, "measurement": 1.0}, "bad_field"),
    ({"plant": "alpha", "gains": {**GAINS, "kd": 0.0}, "measurement": 1.0}, "bad_field"),
    ({"plant": "alpha", "gains": {"kp": 1.0, "ki": "x"}, "measurement": 1.0}, "bad_field"),
    ({"plant": "alpha", "gains": {}, "measurement": 1.0}, "bad_field"),
    ({"plant": "alpha", "gains": GAINS}, "bad_field"),
    ({"plant": "alpha", "gains": GAINS, "measurement": math.nan}, "non_finite"),
    ({"plant": "alpha", "gains": {"kp": math.inf, "ki": 0.0}, "measurement": 1.0}, "non_finite"),
    ({"plant": "alpha", "gains": {"kp": 2.5, "ki": 0.0}, "measurement": 1.0}, "out_of_bounds"),
]


def test_bad_observations_are_refused_and_change_nothing(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        c = d.client("alpha")
        codes = []
        for fields, _ in BAD:
            with pytest.raises(DaemonError) as err:
                c.request("observe", **fields)
            codes.append(err.value.code)
        status = c.status("alpha")["plants"][0]
    finally:
        assert d.stop() == 0
    assert codes == [code for _, code in BAD]
    assert status["t"] == 1 and status["tells"] == 0
    assert not [e for e in d.events() if e["event"] == "measurement"]


def test_observe_waits_for_the_pending_proposal_and_respects_the_claim(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        driver = d.client("alpha", adapter="driver")
        p = driver.ask()
        with pytest.raises(DaemonError) as pending:
            driver.observe(GAINS, 1.0)
        driver.tell(p["proposal_id"], 1.0)
        with pytest.raises(DaemonError) as claimed:
            d.client("alpha", adapter="someone-else").observe(GAINS, 1.0)
        assert driver.observe(GAINS, 1.0)["t"] == 2
    finally:
        assert d.stop() == 0
    assert pending.value.code == "proposal_pending" and p["proposal_id"] in pending.value.message
    assert claimed.value.code == "plant_claimed"


def test_best_and_status_with_a_bad_daemon_file_exit_2_with_one_line(tmp_path, capsys):
    from tvbod.commands import main

    for command in ("best", "status"):
        argv = [command, *(["alpha"] if command == "best" else []), "--config",
                str(tmp_path / "missing.yaml")]
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and "missing.yaml" in err
