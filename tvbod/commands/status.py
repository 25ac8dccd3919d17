"""`tvbod status`: ask a running daemon for its plants' status and print a table."""

from __future__ import annotations

import argparse
import json
import sys

from tvbod.service.daemon_file import CONFIG_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help=f"{CONFIG_HELP}; its first endpoint is "
                        "used")
    parser.add_argument("--endpoint", help="endpoint to connect to (overrides --config)")
    parser.add_argument("--plant", help="only this plant")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per try (default 2)")
    parser.add_argument("--json", action="store_true", help="print the raw reply as JSON")
    parser.add_argument("--watch", type=float, nargs="?", const=2.0, default=None,
                        metavar="SECONDS", help="refresh the table every SECONDS (default 2) "
                        "until Ctrl-C, like `watch`")


def _endpoint(args) -> str:
    """--endpoint, else the daemon file's first endpoint; a bad daemon file exits 2 (one line)."""
    if args.endpoint:
        return args.endpoint
    from tvbod.service.config import ConfigError, load_daemon_config

    try:
        return load_daemon_config(args.config).endpoints[0]
    except ConfigError as exc:
        print(f"tvbod {args.command}: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def format_table(plants: list[dict]) -> str:
    """A fixed-width table of the status reply's `plants`."""
    head = ("plant", "strategy", "t", "|D|", "resets", "last reset", "pending", "best (predicted)",
            "safety", "ask p50/p99 ms", "tell p50/p99 ms")
    rows = [head]
    for p in plants:
        lat = p["latency"]
        fmt = lambda a, b: "-" if a is None else f"{a:.2f}/{b:.2f}"  # noqa: E731
        rows.append((p["plant"], p["strategy"], str(p["t"]), str(p["dataset_size"]),
                     str(p["resets"]), str(p["last_reset_t"] or "-"),
                     p["pending"]["proposal_id"] if p["pending"] else "-", _best(p.get("best")),
                     _safety(p.get("safety")),
                     fmt(lat["ask_p50_ms"], lat["ask_p99_ms"]),
                     fmt(lat["tell_p50_ms"], lat["tell_p99_ms"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _render(reply: dict, endpoint: str) -> str:
    d = reply["daemon"]
    quarantined = "".join(f"\nQUARANTINED {name}: {reason}"
                          for name, reason in sorted(d.get("quarantined", {}).items()))
    return (f"tvbod {d['version']} pid {d['pid']} up {d['uptime_s']:.0f} s, "
            f"{d['messages']} messages, endpoint {endpoint}\n" + format_table(reply["plants"])
            + quarantined)


def _safety(safety: dict | None) -> str:
    """`-`, or the violations (failures among them) and the certified share of the box."""
    if not safety:
        return "-"
    frac = safety.get("safe_fraction")
    return (f"{safety['violations']} viol ({safety['failures']} failed)"
            + ("" if frac is None else f", safe {100 * frac:.0f}%"))


def _best(best: dict | None) -> str:
    if not best or best.get("gains") is None:
        return "-"
    return f"{best['mean']:.4g} +- {best['std']:.2g}"


def run(args: argparse.Namespace) -> int:
    from tvbod.client import DaemonClient, DaemonError, DaemonUnavailable

    endpoint = _endpoint(args)
    client = DaemonClient(endpoint, args.plant or "", timeout_s=args.timeout, retries=1,
                          adapter="tvbod-status")
    try:
        if args.watch is not None:
            return _watch(client, args, endpoint)
        reply = client.status(args.plant)
    except (DaemonUnavailable, DaemonError) as exc:
        print(f"tvbod status: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.json:
        print(json.dumps(reply, indent=2))
        return 0
    print(_render(reply, endpoint))
    return 0


def _watch(client, args: argparse.Namespace, endpoint: str) -> int:
    """Redraw the table every `args.watch` seconds until Ctrl-C (exit 0); a daemon that does not
    answer is shown as such and asked again at the next refresh."""
    import time

    from tvbod.client import DaemonError, DaemonUnavailable

    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    interval = max(0.1, args.watch)
    try:
        while True:
            try:
                body = _render(client.status(args.plant), endpoint)
            except (DaemonUnavailable, DaemonError) as exc:
                body = f"tvbod status: {exc}"
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            print(f"{clear}every {interval:g} s, {stamp} (Ctrl-C to stop)\n{body}\n", flush=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
