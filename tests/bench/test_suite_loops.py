"""No reset loop on the drift suite's dev plants: the shipped optimizer and the bounds-only plant
file, on a static plant and on its large change, reset at most twice more than there are changes
in 60 steps (a loop resets every 4-5 steps: what the uninformed hold and the refractory backoff
rule out; the cart-pole file on Hartmann-3, whose lengthscales do not fit, still has false
resets), at a small run count and cheap budgets so that CI can afford it."""

import pytest

from tvbod.bench import plant_runs as pr
from tvbod.bench.suite import algorithms as al
from tvbod.bench.suite import run as sr

HORIZON, RUNS = 60, 2
CELLS = [("cartpole", "none"), ("cartpole", "jump-large"), ("dc-motor", "none"),
         ("dc-motor", "jump-large"), ("hartmann3", "none"), ("hartmann3", "optimum-jump")]
ROWS = {"et-shipped": pr.shipped_algo("ET-GP-UCB (shipped)", "cartpole"),
        "et-bounds": al.BOUNDS_ONLY}


@pytest.mark.parametrize("plant, drift", CELLS)
@pytest.mark.parametrize("row", sorted(ROWS))
def test_no_reset_loop_on_a_dev_plant(plant, drift, row):
    changes = 0 if drift == "none" else 1
    for run in range(RUNS):
        r = sr.run_task(plant, drift, ROWS[row], run, 0, sr.Config(HORIZON, al.QUICK))
        assert len(r["reset_times"]) <= changes + 2, (run, r["reset_times"])
