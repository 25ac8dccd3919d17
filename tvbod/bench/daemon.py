"""`tvbod bench daemon`: round-trip latency and throughput through a real daemon process.

A daemon is started on a temporary state directory with N identical plants; one client process
drives every plant at once from a single poller (one DEALER per plant, one request in flight per
plant, ask -> tell -> ask ...), so the daemon sees N concurrent adapters. Each request's round
trip (send to reply) is recorded. Prints a table; `--out` also writes results.json.

With `--box-plants`, `--arms-plants` or `--refit-probe` it is instead the open-loop load run
(tvbod/bench/daemon_open.py): plants stepping at set rates, missed slots, daemon CPU and memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from tvbod.bench.daemon_open import add_load_arguments, is_load_run, run_load
from tvbod.bench.daemon_proc import DaemonProcess, memory_mb, write_daemon_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plants", default="1,50", help="comma list of plant counts (default 1,50)")
    parser.add_argument("--transport", default="ipc,tcp", help="comma list of ipc,tcp (default both)")
    parser.add_argument("--domain", default="arms", choices=("arms", "box"),
                        help="arms: 50 arms, cheap optimizer (daemon overhead); box: default 2-D box")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per case")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds not measured per case")
    parser.add_argument("--port", type=int, default=5711, help="tcp port on 127.0.0.1")
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="the daemon file's checkpoint_every (open-loop runs; default: the "
                             "daemon's, 50 journal records)")
    parser.add_argument("--model-workers", choices=("thread", "process"), default="thread",
                        help="the daemon's model_worker_kind (default thread)")
    add_load_arguments(parser)


def _arms_matrix(n: int = 50) -> list[list[float]]:
    import numpy as np

    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, 8))
    return ((A @ A.T) / 8 + 0.05 * np.eye(n)).round(12).tolist()


def _write_config(root: Path, plants: int, domain: str, endpoint: str,
                  model_workers: str = "thread") -> None:
    write_daemon_file(root, endpoint, model_workers)
    if domain == "arms":
        import yaml

        body = {"parameters": [{"name": "arm", "arms": 50}], "sense": "maximize",
                "optimizer": {"strategy": "et-gp-ucb", "noise_variance": 0.01,
                              "measurement": {"offset": 0.0, "scale": 1.0},
                              "kernel": {"type": "matrix", "matrix": _arms_matrix()}}}
        text = yaml.safe_dump(body)
    else:
        text = textwrap.dedent("""\
            parameters:
              - {name: kp, lower: 0.0, upper: 1.0}
              - {name: kd, lower: 0.0, upper: 1.0}
            sense: maximize
            optimizer: {strategy: et-gp-ucb}
            """)
    for i in range(plants):
        (root / "plants" / f"p{i:03d}.yaml").write_text(f"name: p{i:03d}\n" + text)


def _objective(gains: dict) -> float:
    return float(sum((v - 0.3) ** 2 for v in gains.values()) if "arm" not in gains
                 else ((gains["arm"] * 7919) % 50) / 50.0)


def drive(endpoint: str, plants: list[str], seconds: float, warmup: float) -> dict:
    """Drive every plant concurrently; returns round-trip samples and per-plant step counts."""
    import zmq

    from tvbod.protocol import decode_reply, encode, parse_reply, request_message

    ctx = zmq.Context.instance()
    poller = zmq.Poller()
    socks, state = {}, {}
    for name in plants:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        poller.register(s, zmq.POLLIN)
        socks[s] = name
        state[s] = {"n": 0, "next": "ask", "proposal": None}
    rtt = {"ask": [], "tell": []}
    steps = {name: 0 for name in plants}
    errors = 0
    msgs = 0

    def send(s):
        st = state[s]
        st["n"] += 1
        extra = {}
        if st["next"] == "tell":
            p = st["proposal"]
            extra = {"proposal_id": p.proposal_id, "measurement": _objective(p.gains)}
        msg = request_message(st["next"], f"{socks[s]}-{st['n']}", plant=socks[s], **extra)
        st["sent"] = time.perf_counter()
        s.send(encode(msg))

    for s in socks:
        send(s)
    t0 = time.perf_counter()
    measure_from, stop_at = t0 + warmup, t0 + warmup + seconds
    while True:
        now = time.perf_counter()
        if now >= stop_at:
            break
        for s, _ in poller.poll(100):
            reply = decode_reply(s.recv())
            now = time.perf_counter()
            st = state[s]
            kind = st["next"]
            if now >= measure_from:
                rtt[kind].append(now - st["sent"])
                msgs += 1
            if not reply["ok"]:
                errors += 1
                st["next"] = "ask"
            elif kind == "ask":
                st["proposal"], st["next"] = parse_reply(reply), "tell"
            else:
                st["next"] = "ask"
                if now >= measure_from:
                    steps[socks[s]] += 1
            send(s)
    for s in socks:
        s.close(linger=0)
    return {"rtt": rtt, "steps": steps, "errors": errors, "messages": msgs, "seconds": seconds}


def _pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


def run_case(plants: int, transport: str, domain: str, seconds: float, warmup: float,
             port: int, ready_timeout: float = 600.0, model_workers: str = "thread") -> dict:
    """One closed-loop case. A daemon not READY within `ready_timeout` s gives a row marked
    `complete: false` (with the reason), not an exception."""
    with tempfile.TemporaryDirectory(prefix="tvbod-bench-") as tmp:
        root = Path(tmp)
        endpoint = (f"ipc://{root}/run/tvbod.sock" if transport == "ipc"
                    else f"tcp://127.0.0.1:{port}")
        _write_config(root, plants, domain, "ipc://{runtime_dir}/tvbod.sock"
                      if transport == "ipc" else endpoint, model_workers)
        daemon = DaemonProcess(root)
        row = {"plants": plants, "transport": transport, "domain": domain,
               "model_workers": model_workers}
        try:
            daemon.start()
            ready = daemon.wait_ready(ready_timeout)
            row["ready_s"] = ready
            if ready is None:
                why = ("exited" if not daemon.alive()
                       else f"was not READY within {ready_timeout:g} s")
                return {**row, "complete": False, "reason": f"the daemon {why}",
                        "log_tail": daemon.log_tail()}
            rss_before = memory_mb(daemon.pid)["rss_mb"]
            res = drive(endpoint, [f"p{i:03d}" for i in range(plants)], seconds, warmup)
            rss_after = memory_mb(daemon.pid)["rss_mb"]
        finally:
            daemon.stop(30)
    rates = [n / seconds for n in res["steps"].values()]
    return {
        **row, "complete": True,
        "messages_per_s": res["messages"] / seconds,
        "ask_p50_ms": _pct(res["rtt"]["ask"], 50), "ask_p99_ms": _pct(res["rtt"]["ask"], 99),
        "tell_p50_ms": _pct(res["rtt"]["tell"], 50), "tell_p99_ms": _pct(res["rtt"]["tell"], 99),
        "slowest_plant_steps_per_s": min(rates), "fastest_plant_steps_per_s": max(rates),
        "errors": res["errors"], "daemon_rss_mb_start": rss_before, "daemon_rss_mb_end": rss_after,
    }


def format_table(rows: list[dict]) -> str:
    head = ("plants", "transport", "domain", "msgs/s", "ask p50/p99 ms", "tell p50/p99 ms",
            "slowest plant steps/s", "daemon RSS MB", "errors")
    lines = [head]
    for r in rows:
        if not r["complete"]:
            lines.append((str(r["plants"]), r["transport"], r["domain"], "INCOMPLETE:",
                          r["reason"], "", "", "", ""))
            continue
        lines.append((str(r["plants"]), r["transport"], r["domain"], f"{r['messages_per_s']:.0f}",
                      f"{r['ask_p50_ms']:.2f}/{r['ask_p99_ms']:.2f}",
                      f"{r['tell_p50_ms']:.2f}/{r['tell_p99_ms']:.2f}",
                      f"{r['slowest_plant_steps_per_s']:.1f}",
                      f"{r['daemon_rss_mb_end']:.0f}", str(r["errors"])))
    w = [max(len(l[i]) for l in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(x) for c, x in zip(l, w)) for l in lines)


def run(args: argparse.Namespace) -> int:
    if is_load_run(args):
        run_load(args)
        return 0
    rows = []
    for transport in args.transport.split(","):
        for n in (int(v) for v in args.plants.split(",")):
            print(f"[bench daemon] {n} plant(s) over {transport}, {args.domain} ...",
                  file=sys.stderr)
            rows.append(run_case(n, transport, args.domain, args.seconds, args.warmup, args.port,
                                 args.ready_timeout, args.model_workers))
    print(format_table(rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    return 0
