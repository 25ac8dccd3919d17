"""Shared command-line plumbing for the adapters: a YAML settings file plus overrides.

Every adapter also takes CURVE keys for a daemon with a `security:` section (docs/security.md):
`--curve-secret FILE` (the adapter's `NAME.key_secret` from `tvbod keygen`) and `--curve-server
FILE` (the daemon's public `NAME.key`), or `curve_secret:` / `curve_server:` in the settings file
(relative paths resolve against that file's directory). Give both or neither.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

import sys
from collections.abc import Callable

from plant_adapters.client import DaemonClient, DaemonError, DaemonUnavailable, load_curve_keys

#: Settings every adapter accepts besides its own defaults.
CURVE_SETTINGS = ("curve_secret", "curve_server")


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", type=Path, help="adapter settings (YAML); flags override it")
    p.add_argument("--endpoint", help="daemon endpoint, e.g. ipc:///run/tvbod/tvbod.sock")
    p.add_argument("--plant", help="plant name in the daemon")
    p.add_argument("--steps", type=int, help="run until the plant's step T (horizon)")
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
    merged = {**dict.fromkeys(CURVE_SETTINGS), **defaults}
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
        merged.update(loaded)
    for key in ("endpoint", "plant", "steps", "seed", *CURVE_SETTINGS):
        if getattr(args, key, None) is not None:
            merged[key] = getattr(args, key)
    if not merged.get("endpoint"):
        raise SystemExit("no endpoint: give --endpoint or `endpoint:` in --config")
    return merged


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


def run_session(client: DaemonClient, plant, steps: int, args: argparse.Namespace, name: str,
                **runner_options) -> int:
    """The adapter's session: `steps` ask/run/tell steps of `plant` (`plant_adapters.runner`),
    stopped cleanly by SIGTERM/SIGINT, then (`--finish-with-best`) the daemon's recommendation."""
    from plant_adapters.runner import Runner

    runner = Runner(client, plant, steps, record_path=args.out, **runner_options)
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
    (exit 1: a restart may help), a usage or settings error too (exit 2: it cannot)."""
    try:
        return body()
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
