"""Shared command-line plumbing for the adapters: a YAML settings file plus overrides.

Every adapter also takes CURVE keys for a daemon with a `security:` section (docs/security.md):
`--curve-secret FILE` (the adapter's `NAME.key_secret` from `tvbod keygen`) and `--curve-server
FILE` (the daemon's public `NAME.key`), or `curve_secret:` / `curve_server:` in the settings file
(relative paths resolve against that file's directory). Give both or neither.

How far a run goes: `--steps N` (or `steps:`) runs N more steps from where the plant is, so a
rerun on kept state goes on; `--until T` (or `until:`, what the shipped settings files and the
systemd units use) runs up to the plant's absolute step T, so a restarted adapter finishes the
same horizon. A flag of either kind replaces both settings. A run with nothing to do (the plant
already past T) says so on stderr and exits `NOTHING_TO_DO` (3).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from plant_adapters.client import DaemonClient, DaemonError, DaemonUnavailable, load_curve_keys
from plant_adapters.runner import NOTHING_TO_DO, Horizon, NothingToDo, Runner

#: Settings every adapter accepts besides its own defaults.
CURVE_SETTINGS = ("curve_secret", "curve_server")
#: The two ways to say how far a run goes (exactly one applies; see the module docstring).
HORIZON_SETTINGS = ("steps", "until")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of steps")
    return value


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", type=Path, help="adapter settings (YAML); flags override it")
    p.add_argument("--endpoint", help="daemon endpoint, e.g. ipc:///run/tvbod/tvbod.sock")
    p.add_argument("--plant", help="plant name in the daemon")
    how_far = p.add_mutually_exclusive_group()
    how_far.add_argument("--steps", type=_positive, metavar="N",
                         help="run N more steps from where the plant is")
    how_far.add_argument("--until", type=_positive, metavar="T",
                         help="run until the plant's step T (an absolute horizon; a plant already "
                         f"past it: nothing to do, exit {NOTHING_TO_DO})")
    p.add_argument("--seed", type=int, help="plant seed (noise realisation)")
    p.add_argument("--out", type=Path, help="append step records (JSON lines) to this file")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request try")
    p.add_argument("--retries", type=int, default=20, help="Lazy-Pirate retries per request")
    p.add_argument("--curve-secret", type=Path, metavar="FILE",
                   help="this adapter's CURVE secret-key file (NAME.key_secret from tvbod keygen)")
    p.add_argument("--curve-server", type=Path, metavar="FILE",
                   help="the daemon's CURVE public-key file (its NAME.key)")
    p.add_argument("--finish-with-best", action="store_true",
                   help="at the end, ask the daemon for the recommended gains (`best`) and print them")
    return p


def settings(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """defaults < YAML file < command-line flags."""
    merged = {**dict.fromkeys(CURVE_SETTINGS + HORIZON_SETTINGS), **defaults}
    if args.config is not None:
        try:
            loaded = yaml.safe_load(args.config.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SystemExit(f"{args.config}: cannot read the adapter settings: "
                             f"{str(exc).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise SystemExit(f"{args.config}: adapter settings must be a mapping")
        unknown = set(loaded) - set(merged)
        if unknown:
            raise SystemExit(f"{args.config}: unknown keys {sorted(unknown)}; allowed: {sorted(merged)}")
        for key in CURVE_SETTINGS:
            if loaded.get(key) is not None:
                if not isinstance(loaded[key], str):
                    raise SystemExit(f"{args.config}: {key} must be a file path")
                loaded[key] = args.config.parent / Path(loaded[key]).expanduser()
        _take_horizon(merged, loaded, f"{args.config}: ")
        merged.update(loaded)
    _take_horizon(merged, {k: getattr(args, k) for k in HORIZON_SETTINGS
                           if getattr(args, k, None) is not None}, "")
    for key in ("endpoint", "plant", "seed", *CURVE_SETTINGS):
        if getattr(args, key, None) is not None:
            merged[key] = getattr(args, key)
    if not merged.get("endpoint"):
        raise SystemExit("no endpoint: give --endpoint or `endpoint:` in --config")
    return merged


def _take_horizon(merged: dict[str, Any], given: dict[str, Any], where: str) -> None:
    """Put the horizon `given` names (a settings file's keys or the flags) in place of the one
    `merged` has: one of `steps` / `until`, a positive whole number."""
    named = [k for k in HORIZON_SETTINGS if given.get(k) is not None]
    if not named:
        return
    if len(named) > 1:
        raise SystemExit(f"{where}give steps (N more) or until (step T), not both")
    value = given[named[0]]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SystemExit(f"{where}{named[0]} must be a positive whole number of steps, got "
                         f"{value!r}")
    merged.update(dict.fromkeys(HORIZON_SETTINGS), **{named[0]: value})


def horizon(cfg: dict[str, Any], limit: int | None = None) -> Horizon:
    """The run's `Horizon` from the merged settings; `limit`: the plant's own last step."""
    if cfg.get("steps") is None and cfg.get("until") is None:
        raise SystemExit("no horizon: give --steps N (N more) or --until T (up to step T)")
    return Horizon(steps=cfg.get("steps"), until=cfg.get("until"), limit=limit)


def client_for(cfg: dict[str, Any], args: argparse.Namespace, adapter: str) -> DaemonClient:
    """The adapter's client; it says at once where it waits and counts down unanswered tries."""
    name = cfg["plant"]
    endpoint = cfg["endpoint"]

    def silence(left: int, tries: int, timeout_s: float) -> None:
        if left > 0:
            print(f"[{name}] no answer from {endpoint} after {timeout_s:g} s; retrying, "
                  f"{left} of {tries - 1} retries left (gives up in about {left * timeout_s:.0f} s)",
                  flush=True)

    print(f"[{name}] waiting for the daemon at {endpoint}", flush=True)
    return DaemonClient(endpoint, cfg["plant"], timeout_s=args.timeout,
                        retries=args.retries, adapter=adapter, adapter_version="1",
                        curve=curve_keys(cfg), on_silence=silence)


def run_session(client: DaemonClient, plant, how_far: Horizon, args: argparse.Namespace,
                name: str, **runner_options) -> int:
    """The adapter's session: ask/run/tell steps of `plant` (`plant_adapters.runner`) as far as
    `how_far` goes, stopped cleanly by SIGTERM/SIGINT, then (`--finish-with-best`) the daemon's
    recommendation."""
    runner = Runner(client, plant, how_far, record_path=args.out, **runner_options)
    runner.install_signal_handlers()
    runner.run()
    if args.finish_with_best:
        finish_with_best(client, name)
    return 0


def finish_with_best(client: DaemonClient, name: str) -> None:
    """Print the daemon's recommendation (`best`) for the plant, as the adapter's last line."""
    reply = client.best()
    if reply.get("gains") is None:
        print(f"[{name}] best: no data yet (t={reply['t']})", flush=True)
        return
    gains = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in reply["gains"].items())
    print(f"[{name}] best gains now (t={reply['t']}, |D|={reply['dataset_size']}): {gains}; "
          f"predicted {reply['mean']:.6g} +- {reply['std']:.3g}", flush=True)


def curve_keys(cfg: dict[str, Any]) -> dict[str, bytes] | None:
    """The CURVE keys the settings name, or None when they name none."""
    secret, server = cfg.get("curve_secret"), cfg.get("curve_server")
    if secret is None and server is None:
        return None
    if secret is None or server is None:
        raise SystemExit("CURVE needs both --curve-secret (this adapter's NAME.key_secret) and "
                         "--curve-server (the daemon's public NAME.key)")
    try:
        return load_curve_keys(secret, server)
    except ValueError as exc:
        raise SystemExit(f"CURVE keys: {exc}") from None


def guarded(name: str, body: Callable[[], int]) -> int:
    """Run an adapter's main body; the daemon's refusals and silence end it with one clear line
    (exit 1: a restart may help), a usage or settings error too (exit 2: it cannot), and so
    does a run with nothing to do (exit `NOTHING_TO_DO`)."""
    try:
        return body()
    except NothingToDo as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return NOTHING_TO_DO
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(f"{name}: {exc.code}", file=sys.stderr)
            return 2
        raise
    except DaemonUnavailable as exc:
        print(f"{name}: the daemon does not answer: {exc}", file=sys.stderr)
    except DaemonError as exc:
        print(f"{name}: the daemon refused: {exc}", file=sys.stderr)
    return 1
