"""The cart-pole adapter: runs the simulated closed loop with the proposed gains.

`python -m plant_adapters.cartpole --config configs/adapters/cartpole.yaml [--steps N | --until T]`
(default: until T = 300).
The bearing friction follows the configured profile (default: x2.5 at t = 100); each step's
process noise is seeded by (seed, t), and the exact regret against the LQR optimum for the
current friction is reported in the tell's metadata and the step records.
"""

from __future__ import annotations

import sys

import numpy as np

from plant_adapters.adapter_cli import (base_parser, client_for, guarded, horizon,
                                        run_session, settings)
from plant_adapters.cartpole.dynamics import CartPoleParams, CartPolePlant, FrictionProfile
from plant_adapters.runner import Outcome

GAIN_ORDER = ("k_x", "k_xd", "k_phi", "k_phid")
DEFAULTS = {
    "endpoint": None, "plant": "cartpole", "until": 300, "seed": 0, "max_cost": 100.0,
    "friction": {"base": 2.2e-3, "profile": "jump", "factor": 2.5, "t0": 100, "t1": None},
}


def make_profile(f: dict) -> FrictionProfile:
    kind = f.get("profile", "jump")
    base = float(f.get("base", 2.2e-3))
    if kind == "constant":
        return FrictionProfile.constant(base)
    if kind == "jump":
        return FrictionProfile.jump(base, float(f.get("factor", 2.5)), int(f.get("t0", 100)))
    if kind == "ramp":
        return FrictionProfile.ramp(base, float(f.get("factor", 2.5)), int(f["t0"]), int(f["t1"]))
    raise SystemExit(f"friction.profile must be constant, jump or ramp, got {kind!r}")


class CartPoleAdapterPlant:
    """Adapts `CartPolePlant` to the runner: gains by name in, cost and exact regret out."""

    name = "cartpole"

    def __init__(self, plant: CartPolePlant) -> None:
        self.plant = plant

    def run(self, gains: dict[str, float], t: int) -> Outcome:
        K = np.array([gains[k] for k in GAIN_ORDER])
        ev = self.plant.evaluate(K, t)
        info = {"friction": self.plant.profile.friction(t), "optimal_cost": ev.optimal_cost}
        if ev.failed:
            return Outcome(None, failed=True, info=info)
        return Outcome(ev.cost, regret=ev.regret, info=info)


def main(argv: list[str] | None = None) -> int:
    return guarded(f"{__package__.split('.')[-1]} adapter", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = base_parser("python -m plant_adapters.cartpole", __doc__.splitlines()[0])
    parser.add_argument("--jump-at", type=int, help="step of the friction jump (overrides friction.t0)")
    args = parser.parse_args(argv)
    cfg = settings(args, DEFAULTS)
    if args.jump_at is not None:
        cfg["friction"] = {**cfg["friction"], "t0": args.jump_at}
    plant = CartPolePlant(CartPoleParams(friction=float(cfg["friction"].get("base", 2.2e-3))),
                          make_profile(cfg["friction"]), seed=int(cfg["seed"]),
                          max_cost=float(cfg["max_cost"]))
    with client_for(cfg, args, "cartpole-adapter") as client:
        return run_session(client, CartPoleAdapterPlant(plant), horizon(cfg), args, cfg["plant"])


if __name__ == "__main__":
    sys.exit(main())
