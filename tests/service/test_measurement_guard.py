"""The measurement guard holds from a plant's first measurement: an absurd value at any step of
a calibrating plant (`measurement: auto`) is refused with `bad_field` or taken as a finite number,
a `failed: true` after it never answers `internal`, and the daemon restarts after SIGTERM and
SIGKILL with every plant answering and every plant's state finite (docs/reliability.md)."""

import json
import os
import signal
import subprocess
import sys

from daemon_harness import Daemon, objective

from plant_adapters.client import DaemonError

#: The absurd values told (all finite: NaN and inf are refused by the protocol as `non_finite`).
ABSURD = {
    "max": 1.7976931348623157e308, "-max": -1.7976931348623157e308, "1e308": 1e308,
    "1e200": 1e200, "-1e200": -1e200, "subnormal": 5e-324, "-subnormal": -5e-324,
    "-0": -0.0, "huge-after-small": 1e11, "limit": 1e12, "past-limit": 1.0000001e12,
}
#: The CI subset: the largest and the overflowing ones, a subnormal, -0.0, two under the limit
#: (at the limit, a failure right after it must still be recordable).
QUICK = ("max", "1e200", "subnormal", "-0", "huge-after-small", "limit")
LONG = os.environ.get("TVBOD_LONG_TESTS") == "1"
POSITIONS = range(1, 26)

PLANT = """\
name: {name}
parameters:
  - {{name: kp, lower: 0.0, upper: 2.0}}
  - {{name: ki, lower: -1.0, upper: 1.0}}
sense: minimize
failure: {{policy: mean_plus_sigma, sigmas: 2}}
optimizer:
  strategy: et-gp-ucb
  kernel: {{lengthscales: 0.3}}
  noise_variance: 0.01
  measurement: auto
  budget: {{candidates: 64, starts: 1, maxiter: 5}}
"""


def _plants():
    values = ABSURD if LONG else QUICK
    return {f"{key.replace('-', 'm').replace('_', '')}-p{pos}": (ABSURD[key], pos)
            for key in values for pos in POSITIONS}


def _drive(d, name, value, position):
    """Tell ordinary costs, `value` at step `position`, then `failed: true` and one more cost.
    Returns the error codes of telling `value` (never `internal`)."""
    codes = []
    with d.client(name, retries=0) as c:
        step = 1
        while step <= position + 2:
            p = c.ask()
            y = value if step == position else 10.0 + objective(p["gains"], p["t"])
            failed = step == position + 1
            try:
                c.tell(p["proposal_id"], None if failed else y, failed=failed)
            except DaemonError as exc:
                assert exc.code == "bad_field" and not failed, (name, step, str(exc))
                if step == position:
                    codes.append(exc.code)
                    c.tell(p["proposal_id"], 10.0 + objective(p["gains"], p["t"]))
                else:
                    # An accepted absurd value set the scale: ordinary costs are refused as
                    # absurd in turn, and the error says to send failed=true, which must work.
                    assert abs(value) > 1e9 and position <= 2, (name, step, str(exc))
                    c.tell(p["proposal_id"], None, failed=True)
            step += 1
    return codes


def _all_answer(d, plants):
    with d.client() as c:
        status = c.status()
    assert status["daemon"]["quarantined"] == {}
    assert {p["plant"] for p in status["plants"]} == {*plants, "alpha"}  # the harness's own
    for name, (_, position) in plants.items():
        with d.client(name) as c:
            assert c.ask()["t"] == position + 3


def test_absurd_values_at_every_calibration_step_keep_every_plant_restartable(tmp_path):
    plants = _plants()
    d = Daemon(tmp_path, plants={}, checkpoint_every=7)
    for name in plants:
        (tmp_path / "plants" / f"{name}.yaml").write_text(PLANT.format(name=name))
    d.start()
    refused = {name: _drive(d, name, *vp) for name, vp in plants.items()}
    assert d.stop(signal.SIGTERM) == 0
    d.start()
    _all_answer(d, plants)  # each plant's step-(position + 3) proposal is now pending
    d.kill()
    d.start()
    _all_answer(d, plants)
    assert d.stop() == 0
    inspect = subprocess.run([sys.executable, "-m", "tvbod", "inspect", str(d.state), "--json"],
                             capture_output=True, text=True, timeout=300)
    assert inspect.returncode == 0, inspect.stderr
    summaries = json.loads(inspect.stdout)
    assert len(summaries) == len(plants) + 1 and not any(s["errors"] for s in summaries)
    # What the guard refused: values beyond max_measurement_abs (1e12) wherever they came, and
    # from the third step on (a scale from two measurements) values beyond max_measurement_sigmas.
    for name, (value, position) in plants.items():
        expected = abs(value) > 1e12 or (position >= 3 and abs(value) > 1e9)
        assert (refused[name] == ["bad_field"]) == expected, (name, refused[name])
    print(f"\nguard: {len(plants)} plants (values x positions 1..25), each restarted after "
          f"SIGTERM and SIGKILL; refused {sum(bool(v) for v in refused.values())}")
