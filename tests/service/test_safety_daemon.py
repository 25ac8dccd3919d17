"""Safe tuning in a real daemon: the plant file's `safety:` (seeds and steps by parameter name),
the seed as the first proposal, a catastrophic measurement recorded as a violation (not
refused), a failed experiment at the cap, `safety_violation` events, `status` / `best`, SIGKILLs
that change nothing, and `tvbod replay` (exact, and the what-if `--set safety.max_cost=...`)."""

import random
import subprocess
import sys

import pytest
from daemon_harness import SAFE_PLANT, Daemon, KillSchedule, drive, measurement_history

from tvbod.service.config import load_plant_config
from tvbod.service.config.common import ConfigError



def _safe_daemon(root, checkpoint_every: int = 5) -> Daemon:
    d = Daemon(root, checkpoint_every=checkpoint_every)
    (root / "plants" / "alpha.yaml").write_text(SAFE_PLANT)
    return d


def _events(d: Daemon, name: str) -> list[dict]:
    return [e for e in d.events() if e["event"] == name]


def test_a_safe_plant_starts_at_its_seed_and_records_violations_and_failures(tmp_path):
    d = _safe_daemon(tmp_path).start()
    try:
        with d.client() as c:
            first = c.ask()
            assert first["gains"] == pytest.approx({"kp": 1.0, "ki": 0.2}, abs=1e-12)
            c.tell(first["proposal_id"], 0.05)
            last = first["gains"]["kp"]
            for _ in range(6):
                p = c.ask()
                assert abs(p["gains"]["kp"] - last) <= 0.5 + 1e-9  # max_step from the last run
                last = p["gains"]["kp"]
                c.tell(p["proposal_id"], 0.05 + 0.1 * (p["gains"]["kp"] - 1.0) ** 2)
            best = c.best()
            p = c.ask()
            c.tell(p["proposal_id"], 1e7)  # beyond max_measurement_sigmas (1e6): capped, kept
            p = c.ask()
            reply = c.tell(p["proposal_id"], None, failed=True)
            assert reply["failed"] and reply["measurement"] > 1.2
            status = c.status()["plants"][0]
            after = c.best()
    finally:
        assert d.stop() == 0
    assert status["safety"]["violations"] == 2 and status["safety"]["failures"] == 1
    assert 0.0 <= status["safety"]["safe_fraction"] < 1.0
    assert best["certified"] is True
    assert after["certified"] in (True, False)  # after a reset D may certify nothing yet
    warned = _events(d, "safety_violation")
    assert [w["failed"] for w in warned] == [False, True]
    assert warned[0]["measurement"] == 1e7 and warned[0]["threshold"] == 1.2
    measured = _events(d, "measurement")
    assert [m["safety_violation"] for m in measured][-2:] == [True, True]
    assert all(0.0 <= m["safe_fraction"] <= 1.0 for m in measured)
    assert max(m["safe_fraction"] for m in measured[:7]) > 0.0  # the seed's data certify some


def test_status_table_shows_the_safety_column(tmp_path):
    d = _safe_daemon(tmp_path).start()
    try:
        drive(d, 3, timeout_s=1.0)
        out = subprocess.run([sys.executable, "-m", "tvbod", "status", "--config",
                              str(tmp_path / "tvbod.yaml")], capture_output=True, text=True,
                             timeout=60)
    finally:
        d.stop()
    assert out.returncode == 0, out.stderr
    assert "safety" in out.stdout and "viol (" in out.stdout and "safe " in out.stdout


def test_sigkills_change_nothing_and_replay_is_exact_with_a_what_if(tmp_path):
    steps = 30
    ref = _safe_daemon(tmp_path / "ref", checkpoint_every=4).start()
    drive(ref, steps, timeout_s=0.5)
    assert ref.stop() == 0
    d = _safe_daemon(tmp_path / "crash", checkpoint_every=4).start()
    rng = random.Random(3)
    with KillSchedule(d, rng.sample(range(2, steps - 2), 4), rng) as schedule:
        drive(d, steps, schedule, timeout_s=0.5)
    d.wait_ready()
    assert d.stop() == 0
    assert measurement_history(d) == measurement_history(ref)
    plant_dir = d.state / "plants" / "alpha"
    out = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(plant_dir)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and f"{steps} steps reproduced exactly" in out.stdout, \
        out.stdout + out.stderr
    what_if = subprocess.run([sys.executable, "-m", "tvbod", "replay", str(plant_dir),
                              "--set", "safety.max_cost=0.5"], capture_output=True, text=True,
                             timeout=300)
    assert what_if.returncode == 0, what_if.stdout + what_if.stderr


@pytest.mark.parametrize("edit, key", [
    (lambda s: s.replace("safety:\n", "failure: {policy: penalty, value: 5}\nsafety:\n"),
     "failure"),
    (lambda s: s.replace("{kp: 1.0, ki: 0.2}", "{kp: 1.0}"), "safety.safe_seeds[0].ki"),
    (lambda s: s.replace("{kp: 0.5}", "{kd: 0.5}"), "safety.max_step.kd"),
    (lambda s: s.replace("max_cost: 1.2", "min_reward: 1.2"), "safety.min_reward"),
    (lambda s: s.replace("{kp: 1.0, ki: 0.2}", "{kp: 3.0, ki: 0.2}"), "safety.safe_seeds[0]"),
    (lambda s: s + "  safety: {max_cost: 1}\n", "optimizer.safety"),
])
def test_bad_safety_in_a_plant_file_names_the_file_and_key(tmp_path, edit, key):
    path = tmp_path / "alpha.yaml"
    path.write_text(edit(SAFE_PLANT))
    with pytest.raises(ConfigError) as exc:
        load_plant_config(path)
    assert str(path) in str(exc.value) and key in str(exc.value), str(exc.value)
