"""`tvbod bench daemon`: round-trip latency and throughput through a real daemon process.

A daemon is started on a temporary state directory with N identical plants; one client process
drives every plant at once from a single poller (one DEALER per plant, one request in flight per
plant, ask -> tell -> ask ...), so the daemon sees N concurrent adapters. Each request's round
trip (send to reply) is recorded. Prints a table; `--out` also writes results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plants", default="1,50", help="comma list of plant counts (default 1,50)")
    parser.add_argument("--transport", default="ipc,tcp", help="comma list of ipc,tcp (default both)")
    parser.add_argument("--domain", default="arms", choices=("arms", "box"),
                        help="arms: 50 arms, cheap optimizer (daemon overhead); box: default 2-D box")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per case")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds not measured per case")
    parser.add_argument("--port", type=int, default=5711, help="tcp port on 127.0.0.1")
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")


def _arms_matrix(n: int = 50) -> list[list[float]]:
    import numpy as np

    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, 8))
    return ((A @ A.T) / 8 + 0.05 * np.eye(n)).round(12).tolist()


def _write_config(root: Path, plants: int, domain: str, endpoint: str) -> None:
    (root / "plants").mkdir(parents=True)
    (root / "tvbod.yaml").write_text(textwrap.dedent(f"""\
        endpoints: ["{endpoint}"]
        runtime_dir: ./run
        state_dir: ./state
        log_format: json
        plants: "plants/*.yaml"
        """))
    if domain == "arms":
        import yaml

        body = {"parameters": [{"name": "arm", "arms": 50}], "sense": "maximize",
                "optimizer": {"strategy": "et-gp-ucb", "noise_variance": 0.01,
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


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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
             port: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tvbod-bench-") as tmp:
        root = Path(tmp)
        endpoint = (f"ipc://{root}/run/tvbod.sock" if transport == "ipc"
                    else f"tcp://127.0.0.1:{port}")
        _write_config(root, plants, domain, "ipc://{runtime_dir}/tvbod.sock"
                      if transport == "ipc" else endpoint)
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        log = open(root / "daemon.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "tvbod", "run", "--config",
                                 str(root / "tvbod.yaml")], stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=root)
        try:
            from tvbod.client import DaemonClient, DaemonUnavailable

            deadline = time.monotonic() + 60
            while True:
                try:
                    DaemonClient(endpoint, "p000", timeout_s=0.5, retries=0).ping()
                    break
                except DaemonUnavailable:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError((root / "daemon.log").read_text()[-2000:])
            rss_before = _rss_mb(proc.pid)
            res = drive(endpoint, [f"p{i:03d}" for i in range(plants)], seconds, warmup)
            rss_after = _rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
    rates = [n / seconds for n in res["steps"].values()]
    return {
        "plants": plants, "transport": transport, "domain": domain,
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
        lines.append((str(r["plants"]), r["transport"], r["domain"], f"{r['messages_per_s']:.0f}",
                      f"{r['ask_p50_ms']:.2f}/{r['ask_p99_ms']:.2f}",
                      f"{r['tell_p50_ms']:.2f}/{r['tell_p99_ms']:.2f}",
                      f"{r['slowest_plant_steps_per_s']:.1f}",
                      f"{r['daemon_rss_mb_end']:.0f}", str(r["errors"])))
    w = [max(len(l[i]) for l in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(x) for c, x in zip(l, w)) for l in lines)


def run(args: argparse.Namespace) -> int:
    rows = []
    for transport in args.transport.split(","):
        for n in (int(v) for v in args.plants.split(",")):
            print(f"[bench daemon] {n} plant(s) over {transport}, {args.domain} ...", file=sys.stderr)
            rows.append(run_case(n, transport, args.domain, args.seconds, args.warmup, args.port))
    print(format_table(rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    return 0
