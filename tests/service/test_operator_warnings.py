"""Warnings an operator can act on, from a real daemon: `measurement_out_of_range` at most once per
regime with a hint that fits the plant's measurement map, `slow_proposal` never for the first
proposal after a start, and a plant file with only bounds stored with `measurement: auto` and the
trigger's loop guard spelled out."""

from daemon_harness import Daemon, objective

from tvbod.service.store import PlantStore


def _warnings(d: Daemon, event: str, plant: str = "alpha") -> list[dict]:
    return [e for e in d.events(plant) if e["event"] == event]


def _drive(d: Daemon, steps: int, value=None, plant: str = "alpha") -> None:
    with d.client(plant) as c:
        for _ in range(steps):
            p = c.ask()
            y = objective(p["gains"], p["t"]) if value is None else value(p)
            c.tell(p["proposal_id"], y)


def test_out_of_range_measurements_warn_once_per_regime_with_the_fixed_map_hint(tmp_path):
    # a fixed map 0 / 1 and costs around 100: every measurement is ~100 prior sds out
    d = Daemon(tmp_path).start()
    try:
        _drive(d, 12, value=lambda p: 100.0 + objective(p["gains"], 1))
    finally:
        d.stop()
    warned = _warnings(d, "measurement_out_of_range")
    regimes = {0} | {e["t"] for e in _warnings(d, "reset")}
    assert 1 <= len(warned) <= len(regimes), (warned, regimes)
    assert len({w["regime_start"] for w in warned}) == len(warned)  # one per regime
    assert warned[0]["t"] == 1 and "offset/scale" in warned[0]["hint"]


def test_out_of_range_under_auto_names_the_calibration_in_its_hint(tmp_path):
    # `auto` calibrated on 20 costs near 1; then costs near 50 for 10 steps (a long refractory
    # period keeps the trigger from resetting, which would re-centre on them): one warning
    extra = "  trigger: {refractory: 1000}\n"
    d = Daemon(tmp_path, {"alpha": {"measurement": "auto", "extra": extra}}).start()
    try:
        _drive(d, 20)
        _drive(d, 10, value=lambda p: 50.0 + p["gains"]["kp"])
    finally:
        d.stop()
    warned = _warnings(d, "measurement_out_of_range")
    assert not _warnings(d, "reset") and len(warned) == 1 and warned[0]["t"] == 21, warned
    assert "calibration_points" in warned[0]["hint"] and "first 20" in warned[0]["hint"]


def test_the_first_proposal_after_each_start_is_not_a_budget_miss(tmp_path):
    # a 1 ms budget: every proposal misses it, except the first one of each daemon start (step 1,
    # then step 7 unless the first run computed it ahead before stopping: then step 8 is timed)
    d = Daemon(tmp_path, extra="ask_time_budget_ms: 1\n").start()
    try:
        _drive(d, 6)
        d.stop()
        d.start()
        _drive(d, 6)
    finally:
        d.stop()
    runs, slow = [], []
    for e in d.events():  # the events of each daemon run, in order
        if e["event"] == "plant_restored":
            runs.append([])
        elif e["event"] == "slow_proposal":
            runs[-1].append(e["t"])
            slow.append(e["t"])
    assert len(runs) == 2 and slow, "a 1 ms budget is missed by some proposal"
    assert 1 not in runs[0] and 2 in runs[0], runs
    assert 7 not in runs[1], runs  # computed after the restart: the first; or before it, in run 1
    assert len(runs[1]) == len(set(runs[1])) and runs[1] == sorted(runs[1]), runs


def test_a_bounds_only_plant_file_is_stored_with_auto_and_the_loop_guard(tmp_path):
    d = Daemon(tmp_path)
    (tmp_path / "plants" / "alpha.yaml").write_text(
        "name: alpha\nparameters:\n  - {name: kp, lower: 0.0, upper: 2.0}\n"
        "  - {name: ki, lower: -1.0, upper: 1.0}\nsense: minimize\n"
        "optimizer: {strategy: et-gp-ucb}\n")
    d.start()
    try:
        _drive(d, 25)
    finally:
        d.stop()
    from tvbod.core.behaviours import NEWEST, spelled

    stored = PlantStore(tmp_path / "state", "alpha").recover().state["optimizer"]
    assert stored["behaviour"] == NEWEST and "measurement" not in stored  # what the file says
    stored = spelled(stored)  # and what the behaviour version makes of it
    assert stored["measurement"] == {"offset": "auto", "scale": "auto", "pessimism": 1.0,
                                     "relevel": True}
    assert stored["noise_variance"] == "auto"
    assert (stored["trigger"]["uninformed_from"], stored["trigger"]["backoff"]) == (1, 2.0)
    assert not _warnings(d, "measurement_out_of_range")
