"""The temperature adapter: replays Intel Lab sensor temperatures; the optimizer picks a sensor.

`python -m plant_adapters.temperature --config configs/adapters/temperature.yaml [--speed S]`
(`--steps N` / `--until T` as every adapter; default: until the data's end, T = 96).
At test step t the measurement is the chosen sensor's temperature, standardized with the training
mean and std; the regret is the hottest sensor's value minus the chosen one's. `--speed 1` paces
the replay in real time (one step per grid interval), `--speed 60` sixty times faster; the
default (0) answers as fast as the daemon does. `--raw data.txt --interval 10` builds the streams
from the original Intel Lab file instead of the shipped 30-minute split (see source.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from plant_adapters.adapter_cli import (base_parser, client_for, guarded, horizon,
                                        run_session, settings)
from plant_adapters.runner import Outcome
from plant_adapters.temperature.source import (
    DATA_DIR, TemperatureStream, load_split, read_raw, resample, split_days, standardize,
)

DEFAULTS = {"endpoint": None, "plant": "temperature", "until": 96, "seed": 0,
            "data_dir": None, "interval_minutes": 30, "speed": 0.0}


class TemperaturePlant:
    """Runner adapter around a `TemperatureStream`: arm index in, standardized temperature out."""

    name = "temperature"

    def __init__(self, stream: TemperatureStream, arm_name: str = "sensor") -> None:
        self.stream = stream
        self.arm_name = arm_name

    def run(self, gains: dict[str, int], t: int) -> Outcome:
        arm = int(gains[self.arm_name])
        value = self.stream.value(arm, t)
        return Outcome(float(value), regret=float(self.stream.regret(arm, t)),
                       info={"best_arm": int(self.stream.best_arm(t))})


def load_stream(cfg: dict, raw: Path | None) -> TemperatureStream:
    if raw is not None:
        ids, times, matrix = resample(read_raw(raw), interval_minutes=int(cfg["interval_minutes"]))
        train, test = split_days(matrix, times)
        print(f"[temperature] {raw}: {len(ids)} motes kept, {matrix.shape[1]} bins of "
              f"{cfg['interval_minutes']} min", file=sys.stderr)
    else:
        try:
            train, test = load_split(Path(cfg["data_dir"]) if cfg["data_dir"] else DATA_DIR)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"data_dir {cfg['data_dir']}: {exc}") from None
    _, test_z, _, _ = standardize(train, test)
    return TemperatureStream(test_z)


def main(argv: list[str] | None = None) -> int:
    return guarded(f"{__package__.split('.')[-1]} adapter", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = base_parser("python -m plant_adapters.temperature", __doc__.splitlines()[0])
    parser.add_argument("--speed", type=float, help="1 = real time, 0 = as fast as possible")
    parser.add_argument("--raw", type=Path, help="original Intel Lab data.txt to resample")
    parser.add_argument("--interval", type=int, help="resampling interval in minutes (with --raw)")
    args = parser.parse_args(argv)
    cfg = settings(args, DEFAULTS)
    if args.speed is not None:
        cfg["speed"] = args.speed
    if args.interval is not None:
        cfg["interval_minutes"] = args.interval
    stream = load_stream(cfg, args.raw)
    how_far = horizon(cfg, limit=len(stream))  # the data's test steps are the plant's last
    delay = 60.0 * float(cfg["interval_minutes"]) / cfg["speed"] if cfg["speed"] > 0 else 0.0
    with client_for(cfg, args, "temperature-adapter") as client:
        hello = client.hello()
        arms = hello["parameters"][0].get("arms")
        if arms is not None and arms != stream.arms:
            raise SystemExit(f"the daemon's plant has {arms} arms, the data {stream.arms} sensors")
        plant = TemperaturePlant(stream, hello["parameters"][0]["name"])
        return run_session(client, plant, how_far, args, cfg["plant"], speed_delay_s=delay)


if __name__ == "__main__":
    sys.exit(main())
