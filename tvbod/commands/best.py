"""`tvbod best PLANT`: ask the running daemon which gains to deploy now.

The rule (tvbod/core/recommend.py): the point of the plant's current dataset D with the best
posterior mean for the next step (for arms: an arm), with the predicted measurement and its
standard deviation in measurement units. Exit 2 for an unknown plant, a plant without data or a
bad daemon file; exit 1 when the daemon does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys

from tvbod.service.daemon_file import CONFIG_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant", help="plant name")
    parser.add_argument("--config", metavar="FILE", help=f"{CONFIG_HELP}; its first endpoint is "
                        "used")
    parser.add_argument("--endpoint", help="endpoint to connect to (overrides --config)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per try (default 2)")
    parser.add_argument("--json", action="store_true", help="print the raw reply as JSON")


def describe(reply: dict) -> str:
    """Two human lines for a `best` reply with data."""
    gains = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in reply["gains"].items())
    return (f"{reply['plant']} at t={reply['t']} (|D|={reply['dataset_size']}, "
            f"{reply['sense']}): deploy {gains}\n"
            f"  predicted measurement {reply['mean']:.6g} +- {reply['std']:.3g} (posterior mean "
            f"+- std there; measured at t={reply['measured_at']})"
            + ("" if reply.get("certified") in (None, True) else
               "\n  NOT certified safe: no point of D is; these are the most certain ones"))


def run(args: argparse.Namespace) -> int:
    from tvbod.client import DaemonClient, DaemonError, DaemonUnavailable
    from tvbod.protocol import is_valid_plant_name
    from tvbod.commands.status import _endpoint

    if not is_valid_plant_name(args.plant):
        print(f"tvbod best: {args.plant!r} is not a plant name", file=sys.stderr)
        return 2
    endpoint = _endpoint(args)
    client = DaemonClient(endpoint, args.plant, timeout_s=args.timeout, retries=1,
                          adapter="tvbod-best")
    try:
        reply = client.best()
    except DaemonUnavailable as exc:
        print(f"tvbod best: {exc}", file=sys.stderr)
        return 1
    except DaemonError as exc:
        print(f"tvbod best: {exc}", file=sys.stderr)
        return 2 if exc.code == "unknown_plant" else 1
    finally:
        client.close()
    if args.json:
        print(json.dumps({k: v for k, v in reply.items() if k not in ("v", "id", "ok")}, indent=2))
    if reply["gains"] is None:
        print(f"tvbod best: plant {args.plant!r} has no data yet (t={reply['t']}, empty dataset)",
              file=sys.stderr)
        return 2
    if not args.json:
        print(describe(reply))
    return 0
