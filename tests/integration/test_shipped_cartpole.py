"""The shipped cart-pole configuration catches the demo's friction jump because its default trigger
is robust, not because a seed was picked: 10 seeds, in-process, as the demo runs it."""

import os
from pathlib import Path

import numpy as np
import pytest

from tvbod.core import make_strategy
from tvbod.service.config import load_plant_config

ROOT = Path(__file__).resolve().parents[2]
JUMP_AT, HORIZON = 100, 130


def _run(seed: int) -> list[int]:
    """The demo's loop (plant_adapters.cartpole + the daemon's failure policy), seeds varied:
    the plant's noise realisation and the optimizer's seed. Returns the reset steps."""
    from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, FrictionProfile

    config = load_plant_config(ROOT / "configs" / "plants" / "cartpole.yaml")
    strategy = make_strategy({**config.optimizer_mapping, "seed": seed})
    params = CartPoleParams()
    plant = CartPolePlant(params, FrictionProfile.jump(params.friction, 2.5, JUMP_AT), seed=seed)
    resets = []
    for t in range(1, HORIZON + 1):
        x = strategy.ask()
        ev = plant.evaluate(x, t)
        if ev.failed:
            mean, std = strategy.predict(x)
            y = config.failure.measurement(mean, std, config.sense)
        else:
            y = ev.cost
        if strategy.tell(x, y).reset:
            resets.append(t)
    return resets


def _rates(seeds: range) -> tuple[dict, list[int], list[int], list[int]]:
    """`(resets per seed, seeds that caught the jump within 10 steps, seeds with a false reset
    before it, seeds with more than 10 resets)`."""
    runs = {seed: _run(seed) for seed in seeds}
    caught = [s for s, r in runs.items() if any(JUMP_AT <= t <= JUMP_AT + 10 for t in r)]
    false = [s for s, r in runs.items() if any(t < JUMP_AT for t in r)]
    return runs, caught, false, [s for s, r in runs.items() if len(r) > 10]


# Measured over seeds 0..91 (this release: the trigger's uninformed rule and `pessimism: 1`): the
# jump caught in 92/92; a false reset before it in 3/92 runs (10/92 before both, most right after
# the 20-point calibration; 0/92 with the rule alone); more than 10 resets in 0/92 (1/92 before).
# The bounds leave room for round-off reshuffling these rates on another machine: at 3.3 % per
# run, 10 seeds show three or more false resets 0.4 % of the time, 40 seeds seven or more 0.3 %.
def test_shipped_cartpole_config_catches_the_friction_jump_in_nine_of_ten_seeds():
    runs, caught, false, loops = _rates(range(10))
    assert len(caught) >= 9, runs
    assert len(false) <= 2, runs
    assert len(loops) <= 1, runs


@pytest.mark.skipif(os.environ.get("TVBOD_LONG_TESTS") != "1", reason="TVBOD_LONG_TESTS=1: 40 seeds")
def test_shipped_cartpole_config_catches_the_jump_in_nine_of_ten_of_forty_seeds():
    runs, caught, false, loops = _rates(range(40))
    assert len(caught) >= 36, runs
    assert len(false) <= 6, runs
    assert len(loops) <= 1, runs


def test_shipped_cartpole_config_uses_the_robust_trigger():
    spec = load_plant_config(ROOT / "configs" / "plants" / "cartpole.yaml").optimizer
    assert spec.trigger.robust and spec.trigger.window >= 2 and spec.min_points == 10
    assert np.isclose(spec.noise_variance, 0.02)
