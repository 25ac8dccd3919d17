"""`tvbod bench daemon`'s open-loop load run against a real daemon process.

No timing assertions: the structure, the counts, missed slots while the daemon is stopped
(SIGSTOP: nothing can be answered, whatever the machine's speed), and deadlines that end a phase
or a start cleanly with what was measured, marked incomplete.
"""

import json
import os
import signal
import time

import pytest
import yaml

from tvbod.bench.daemon import run_case
from tvbod.bench.daemon_load import LoadGenerator, PlantSpec
from tvbod.bench.daemon_plants import plant_mapping, write_plant
from tvbod.bench.daemon_proc import DaemonProcess, write_daemon_file
from bench_cli import run_bench


def _bench(tmp_path, *args, timeout=300):
    return run_bench(tmp_path, "daemon", *args, timeout=timeout)


def test_open_loop_run_seeds_through_observe_restarts_and_reports_every_class(tmp_path):
    work = tmp_path / "work"
    out, res = _bench(tmp_path, "--box-plants", "1", "--box-n", "12", "--arms-plants", "2",
                      "--arms-rate", "5", "--waiting-every", "2", "--duration", "3",
                      "--warmup", "0.5", "--progress", "1", "--workdir", str(work),
                      "--checkpoint-every", "7")
    # The daemon file carries the chosen checkpoint interval, and the results say so.
    assert yaml.safe_load((work / "tvbod.yaml").read_text())["checkpoint_every"] == 7
    assert res["settings"]["checkpoint_every"] == 7
    # The timed phase ran the shipped cart-pole mapping: the file as shipped (renamed), and the
    # restarted daemon saw the seeding's refit_every change back.
    assert yaml.safe_load((work / "plants" / "box000.yaml").read_text()) == \
        plant_mapping("box", "box000")
    reloads = [json.loads(line) for line in (work / "daemon-2.log").read_text().splitlines()
               if '"config_reloaded"' in line]
    assert [(e["plant"], e["changed"]) for e in reloads] == \
        [("box000", ["hyperparameters.refit_every"])]
    assert res["complete"] is True and res["plants"] == 3
    # Two starts, both READY (the daemon's own READY=1): fresh, then restarted on seeded state.
    assert [s["what"] for s in res["starts"]] == ["fresh", "restart after seeding"]
    assert all(s["ready_s"] > 0 for s in res["starts"])
    seed, prime, steady = res["phases"]
    assert [ph["phase"] for ph in res["phases"]] == ["seed", "prime", "steady"]
    box = seed["groups"]["box"]
    # Fewer than the 20 measurements `measurement: auto` needs, so no reset can occur while seeding.
    assert box["observed"] == 12 and box["latency"]["observe"]["count"] == 12
    assert seed["dataset_size"]["box"] == [12, 12] and box["resets"] == 0
    # prime: one step of the seeded plant (ask, tell at once), not of the unseeded arms plants.
    assert set(prime["groups"]) == {"box"} and prime["groups"]["box"]["steps"] == 1
    assert prime["groups"]["box"]["latency"]["tell"]["count"] == 1
    assert prime["dataset_size"]["box"] == [13, 13]
    assert set(steady["groups"]) == {"box", "arms"}
    for name, g in steady["groups"].items():
        assert g["slots"] > 0 and g["steps"] > 0 and g["unanswered"] == 0 and not g["errors"]
        assert g["offered_steps_per_s"] == g["plants"] * g["rate_hz"]
        for kind in ("ask_ready", "tell"):
            lat = g["latency"][kind]
            assert lat["count"] > 0 and 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert g["latency"]["observe"]["count"] == 0
    assert steady["groups"]["arms"]["latency"]["ask_waiting"]["count"] > 0
    # The seeded points survived the restart under the shipped (refit-every-tell) mapping.
    assert steady["groups"]["box"]["dataset_size_min_max"][0] > 12
    for ph in res["phases"]:
        assert ph["daemon_cpu_s"] > 0 and ph["rss_mb"] > 10 and ph["hwm_mb"] >= ph["rss_mb"]
        assert ph["daemon_cpu_wait_s"] >= 0
        assert ph["generator_cpu_pct"] >= 0
    table = out.stdout.splitlines()
    assert table[0].split()[:3] == ["phase", "group", "plants"]
    assert any(line.startswith("goal tell p99 <= 10 ms") for line in table)
    assert "[bench daemon] steady" in out.stderr  # progress lines


@pytest.fixture(scope="module")
def arms_daemon(tmp_path_factory):
    """One daemon with two arms plants for the tests below (each uses its own phase names)."""
    tmp_path = tmp_path_factory.mktemp("arms-daemon")
    write_daemon_file(tmp_path, "ipc://{runtime_dir}/tvbod.sock")
    for name in ("arms000", "arms001"):
        write_plant(tmp_path / "plants", "arms", name)
    daemon = DaemonProcess(tmp_path)
    daemon.start()
    assert daemon.wait_ready(300) is not None, daemon.log_tail()
    specs = [PlantSpec(n, "arms", "arms", 10.0) for n in ("arms000", "arms001")]
    gen = LoadGenerator(f"ipc://{tmp_path}/run/tvbod.sock", specs, daemon, progress_s=1.0,
                        log=lambda line: None)
    gen.watch_daemon(daemon)
    assert gen.hello(120) is None
    yield daemon, gen
    os.kill(daemon.pid, signal.SIGCONT)
    daemon.stop()
    gen.close()


def test_slots_that_find_the_daemon_stopped_are_counted_missed(arms_daemon):
    daemon, gen = arms_daemon
    gen.run_phase("normal", {"arms"}, 1.0)
    os.kill(daemon.pid, signal.SIGSTOP)  # from here on no reply can come until SIGCONT
    try:
        stalled = gen.run_phase("stalled", {"arms"}, 2.0)
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    assert stalled["complete"]
    counts = gen.rec.counts[("stalled", "arms")]
    # 2 plants x 10 Hz x 2 s; each plant sends at most one request, every later slot is missed.
    assert counts["slots"] >= 15
    assert counts["missed_slots"] >= counts["slots"] - 2
    unanswered = gen.finish(grace_s=60)
    assert unanswered == {}  # after SIGCONT the daemon answers everything that was sent
    slowest = max(max(v) for v in gen.rec.samples.values())
    assert slowest >= 1.0  # each plant had a request out during the 2 s stall


def test_a_deadline_ends_the_phase_cleanly_marked_incomplete(arms_daemon):
    daemon, gen = arms_daemon
    start = time.perf_counter()
    ph = gen.run_phase("cut", {"arms"}, duration_s=600.0, deadline=start + 1.5)
    assert ph["complete"] is False and "deadline" in ph["reason"]
    assert ph["seconds"] < 600 and daemon.alive()
    assert gen.rec.counts[("cut", "arms")]["slots"] > 0


def test_a_start_slower_than_the_ready_timeout_is_reported_not_raised(tmp_path):
    # 10 ms: no daemon process gets to READY that fast (the interpreter alone takes longer).
    out, res = _bench(tmp_path, "--arms-plants", "1", "--ready-timeout", "0.01")
    assert res["complete"] is False and res["phases"] == []
    assert res["starts"][0]["ready_s"] is None
    assert "not READY within 0.01 s" in res["incomplete"][0]
    assert "INCOMPLETE" in out.stderr and "daemon start (fresh, 1 plants): not READY" in out.stdout
    row = run_case(plants=2, transport="ipc", domain="arms", seconds=1.0, warmup=0.1, port=0,
                   ready_timeout=0.01)
    assert row["complete"] is False and "not READY within 0.01 s" in row["reason"]
