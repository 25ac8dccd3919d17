"""`tvbod` command line: init | run | status | best | report | inspect | replay | export | import |
demo | bench | keygen.

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`;
modules are imported lazily so `tvbod status` does not pay for scipy.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

#: subcommand -> (module, help)
COMMANDS = {
    "init": ("tvbod.commands.init", "write a complete configuration tree (daemon, plants, "
             "adapters, units)"),
    "run": ("tvbod.commands.run", "run the daemon"),
    "status": ("tvbod.commands.status", "ask a running daemon for its plants' status"),
    "best": ("tvbod.commands.best", "the gains to deploy now (posterior-mean maximizer)"),
    "inspect": ("tvbod.commands.inspect", "summarize a plant's checkpoint and journal offline"),
    "replay": ("tvbod.commands.replay", "re-run a plant's optimizer offline from its journal"),
    "report": ("tvbod.commands.report", "a one-file HTML report per plant (read-only)"),
    "export": ("tvbod.commands.export", "a plant's history as CSV or JSON lines (read-only)"),
    "import": ("tvbod.commands.import_csv", "seed a plant's state offline from a CSV"),
    "repair": ("tvbod.commands.repair", "rebuild a quarantined plant from its history "
               "(offline)"),
    "keygen": ("tvbod.commands.keygen", "create a CURVE key pair"),
    "demo": ("tvbod.commands.demo", "the daemon with the demo plants, end to end (make demo)"),
}
#: bench name -> help; the bench's module is `tvbod.bench.<name, with "_" for "-">`
_BENCH_HELP = {
    "within-model": "the paper's synthetic within-model experiment",
    "latency": "ask/tell latency of the core",
    "daemon": "round-trip latency and throughput through the daemon",
    "memory": "daemon memory with many plants, and where it goes",
    "events": "plant events per second through the event path",
    "startup": "time from `tvbod run` to READY, and import times",
    "cartpole": "policy search on the cart-pole with a friction jump",
    "temperature": "replayed Intel Lab temperature sensors",
    "adaptive": "adaptive kappa/lambda vs fixed kappa, EI, random search",
    "agpucb": "A-GP-UCB's 1-D experiments with unknown hyperparameters",
    "stopping-time": "Monte Carlo study of the trigger's stopping time (the paper's 30,000 runs "
                     "per eps)",
    "suite": "drift benchmark suite: plants x drift kinds x algorithms, dev / held-out split",
    "safe-cartpole": "the shipped cartpole-safe plant file with and without safety:",
    "doc-tables": "render (or --check) the docs' results blocks from docs/results/*.json",
}
#: Benches whose module is not `tvbod.bench.<name>`.
_BENCH_MODULE = {"suite": "tvbod.bench.suite.run"}
#: bench name -> (module, help), as COMMANDS
BENCHES = {name: (_BENCH_MODULE.get(name, "tvbod.bench." + name.replace("-", "_")), help_)
           for name, help_ in _BENCH_HELP.items()}


def _available(table: dict) -> dict:
    out = {}
    for name, (module, help_) in table.items():
        if importlib.util.find_spec(module) is not None:
            out[name] = (module, help_)
    return out


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line. With `argv`, only the chosen subcommand's module is imported (its
    `add_arguments`): `tvbod --help` and `tvbod status` load no scipy and no strategy; without
    `argv`, every subcommand is complete."""
    from tvbod import __version__

    command, bench_name = _chosen(argv)
    parser = argparse.ArgumentParser(prog="tvbod", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tvbod {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_) in _available(COMMANDS).items():
        _add(sub, name, module, help_, argv is None or name == command)
    bench = sub.add_parser("bench", help="benchmarks that print tables and write plots")
    bsub = bench.add_subparsers(dest="bench", required=True)
    for name, (module, help_) in _available(BENCHES).items():
        _add(bsub, name, module, help_, argv is None or (command == "bench" and name == bench_name))
    return parser


def _add(sub, name: str, module: str, help_: str, complete: bool) -> None:
    p = sub.add_parser(name, help=help_)
    if complete:
        importlib.import_module(module).add_arguments(p)
    p.set_defaults(_module=module)


def _chosen(argv: list[str] | None) -> tuple[str | None, str | None]:
    """The subcommand and, for `bench`, the benchmark `argv` names (its first words that are not
    options: the top level and `bench` take no option with a value)."""
    words = [a for a in argv or () if not a.startswith("-")]
    return (words[0] if words else None), (words[1] if len(words) > 1 else None)


def main(argv: list[str] | None = None) -> int:
    # A real-time optimizer wants one BLAS thread (docs/benchmarks.md); set before numpy loads.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        code = int(importlib.import_module(args._module).run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (`tvbod inspect ... | head`): stop quietly, as `cat` does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it


if __name__ == "__main__":
    sys.exit(main())
