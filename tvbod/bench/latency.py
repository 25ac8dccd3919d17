"""`tvbod bench latency`: ask and tell latency of the core on a box, and the UCB value each ask reaches.

The same GP everywhere: `gp-ucb` (no resets: D keeps exactly n points) on `[0, 1]^d`, SE kernel
with lengthscale `0.2 sqrt(d)`, noise variance 0.02, spec-default `beta_t` and budget; D is n uniform
points of `objective` plus noise, told one by one. One BLAS thread. Timed (`perf_counter`):

- ask: `strategy.ask()` on an untimed copy of the n-point strategy (no pending proposal, no derived
  caches: as right after a tell); call k runs at step `t = n + 1 + k` (fresh rotation and `beta_t`).
- tell: `strategy.tell(x, y)` on a copy: trigger check + O(n^2) append; "refactor": the append
  replaced by `ExactGP.fit` on all n + 1 points.
- botorch (`--compare botorch`): SingleTaskGP with the same fixed hyperparameters + UCB +
  `optimize_acqf(num_restarts=5, raw_samples=1000)`, model construction included.
- numpy (`--compare numpy`): the plain numpy/scipy step (`numpy_step.py`): Cholesky append, 1000
  Sobol candidates in float64, one batched L-BFGS-B from the best 5; tell and ask together.

Goal lines follow the table: ask p50 at d = 4, n = 400, tell+ask against BoTorch's and
the plain step there, and the worst value/ref per d; each says met, missed or not measured.

value/ref: UCB at a proposal over a dense reference maximum at the same step (2^15 Sobol points +
L-BFGS-B from the best 50 and from the proposals; the best value seen, so <= 1). Details and
results: docs/benchmarks.md, *The core*.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path


from .latency_goals import goal_lines
from .latency_report import compared, format_table, plot_latency
from .latency_reference import _beta, _ratio_summary, _value_ratios

_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")
NOISE_VARIANCE = 0.02
_DEFAULTS = {"dims": [1, 2, 4, 8], "sizes": [10, 100, 400, 1000], "calls": 30, "warmup": 5,
             "ref_calls": 5, "ref_candidates": 2**15, "ref_starts": 50}
_QUICK = {"dims": [1, 3], "sizes": [10, 40], "calls": 5, "warmup": 1, "ref_calls": 2,
          "ref_candidates": 2**11, "ref_starts": 8}
_ANCHORS_HINT = "--compare botorch needs the anchors extra: pip install 'tvbod[anchors]'"


def lengthscale(d: int) -> float:
    """The SE lengthscale used at dimension `d`: `0.2 sqrt(d)` on the unit cube."""
    return 0.2 * math.sqrt(d)


def objective(X):
    """The smooth test function `sum_i sin(5 x_i + i) / sqrt(d)`, `X` `(m, d)` -> `(m,)`."""
    import numpy as np

    return np.sin(5.0 * X + np.arange(X.shape[1])).sum(axis=1) / math.sqrt(X.shape[1])


# ---------------------------------------------------------------------- command line
def _int_list(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("expected positive integers")
    return out


COMPARES = ("botorch", "numpy")


def _compare_list(text: str) -> str:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(v not in COMPARES for v in names):
        raise argparse.ArgumentTypeError(f"expected botorch, numpy or botorch,numpy; got {text!r}")
    return ",".join(v for v in COMPARES if v in names)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dims", type=_int_list, help="dimensions, comma-separated (1,2,4,8)")
    parser.add_argument("--sizes", type=_int_list, help="dataset sizes n (10,100,400,1000)")
    parser.add_argument("--calls", type=int, help="timed calls per measurement (30)")
    parser.add_argument("--warmup", type=int, help="untimed calls before them (5)")
    parser.add_argument("--ref-calls", type=int, help="asks checked against the dense reference (5)")
    parser.add_argument("--compare", type=_compare_list,
                        help="also time BoTorch's step (botorch; the anchors extra), the plain "
                             "numpy/scipy step (numpy), or both (botorch,numpy) in the same run")
    parser.add_argument("--out", type=Path, help="directory for results.json and latency.png")
    parser.add_argument("--quick", action="store_true", help="a tiny run, for tests")
    parser.add_argument("--cartpole-step", action="store_true",
                        help="instead: the shipped cart-pole optimizer's step (tell + MAP refit + "
                             "ask) at n = --sizes (50,150,300)")
    parser.add_argument("--refit", choices=["shipped", "legacy"],
                        help="with --cartpole-step: the shipped file's MAP refit (default) or "
                             "tvbod 0.2's (objective: explicit-inverse, refit_tolerance: 0)")
    parser.add_argument("--polish", choices=["newton", "lbfgsb-joint"],
                        help="the box ask's budget.polish (default: the spec default, "
                             "lbfgsb-joint; newton: the opt-in Newton polish)")
    parser.add_argument("--tolerance", type=float,
                        help="the box ask's budget.tolerance, a fixed setting (default: the newest "
                             "behaviour version's, 1e-5; "
                             "2.220446049250313e-09: SciPy's own, what earlier versions polished to)")
    parser.add_argument("--seed", type=int, default=0)


def _settings(args: argparse.Namespace) -> dict:
    base = dict(_DEFAULTS, **(_QUICK if args.quick else {}))
    for key in ("dims", "sizes", "calls", "warmup", "ref_calls"):
        if getattr(args, key, None) is not None:
            base[key] = getattr(args, key)
    if base["calls"] < 1 or base["warmup"] < 0 or base["ref_calls"] < 0:
        raise SystemExit("--calls must be >= 1, --warmup and --ref-calls >= 0")
    base["ref_calls"] = min(base["ref_calls"], base["calls"])
    step = bool(getattr(args, "cartpole_step", False))
    return dict(base, compare=args.compare, seed=args.seed, quick=bool(args.quick),
                polish=getattr(args, "polish", None), tolerance=getattr(args, "tolerance", None),
                cartpole_step=step, refit=getattr(args, "refit", None),
                step_sizes=(args.sizes or ([12, 24] if args.quick else None)) if step else None)


def _argv(args: argparse.Namespace) -> list[str]:
    out = []
    for key in ("dims", "sizes"):
        if getattr(args, key, None):
            out += [f"--{key}", ",".join(map(str, getattr(args, key)))]
    for key in ("calls", "warmup", "ref_calls", "compare", "out", "seed", "refit", "polish",
                "tolerance"):
        if getattr(args, key, None) is not None:
            out += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return (out + (["--quick"] if args.quick else [])
            + (["--cartpole-step"] if getattr(args, "cartpole_step", False) else []))


def _pinned() -> bool:
    return all(os.environ.get(v) == "1" for v in _THREAD_VARS)


def run(args: argparse.Namespace) -> int:
    if not _pinned():
        if "numpy" in sys.modules:  # BLAS already started with its default threads: use a child
            env = dict(os.environ, **{v: "1" for v in _THREAD_VARS})
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
            cmd = [sys.executable, "-m", "tvbod.bench.latency", *_argv(args)]
            return subprocess.run(cmd, env=env, check=False).returncode
        os.environ.update({v: "1" for v in _THREAD_VARS})
    settings = _settings(args)
    if "botorch" in compared(settings) and importlib.util.find_spec("botorch") is None:
        print(_ANCHORS_HINT, file=sys.stderr)
        return 2
    log = functools.partial(print, file=sys.stderr, flush=True)
    if settings["cartpole_step"]:
        from . import cartpole_step

        result = dict(cartpole_step.measure(settings, _percentiles, log), settings=settings,
                      load_average=os.getloadavg()[0])
        print(cartpole_step.format_table(result, settings["calls"], settings["warmup"]))
    else:
        result = measure(settings, log=log)
        print(format_table(result))
        print("\n".join(goal_lines(result)))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        if not settings["cartpole_step"]:
            plot_latency(result, args.out / "latency.png")
    return 0


# ---------------------------------------------------------------------- measurement
def build_strategy(d: int, n: int, seed: int = 0, polish: str | None = None,
                   tolerance: float | None = None):
    """A `gp-ucb` strategy on `[0, 1]^d` that has been told `n` noisy points of `objective`
    (with `budget.polish: polish` and `budget.tolerance: tolerance` if given)."""
    import numpy as np

    from tvbod.core import make_strategy, parse_spec

    s = make_strategy(parse_spec({
        "strategy": "gp-ucb", "domain": {"lower": [0.0] * d, "upper": [1.0] * d},
        "kernel": {"type": "se", "lengthscales": lengthscale(d)},
        "noise_variance": NOISE_VARIANCE, "seed": seed,
        "measurement": {"offset": 0.0, "scale": 1.0},
        "budget": {"polish": polish} if polish is not None else {},
    }, {"budget.tolerance": tolerance} if tolerance is not None else None))
    rng = np.random.default_rng([seed, d, n])
    X = rng.random((n, d))
    y = objective(X) + rng.normal(0.0, math.sqrt(NOISE_VARIANCE), n)
    for x, yi in zip(X, y):
        s.tell(x, float(yi))
    return s


def _percentiles(seconds: list[float]) -> dict:
    import numpy as np

    ms = 1e3 * np.asarray(seconds)
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
            "min": float(ms.min()), "max": float(ms.max())}


def time_asks(base, calls: int, warmup: int) -> tuple[list[float], list, list[int]]:
    """Seconds per `ask()` on fresh copies of `base`, with the proposals and their steps."""
    times, proposals, steps = [], [], []
    for k in range(warmup + calls):
        s = copy.deepcopy(base)
        s._t = base.t + k  # a fresh rotation and beta_t per call; the dataset stays the same
        t0 = time.perf_counter()
        x = s.ask()
        dt = time.perf_counter() - t0
        if k >= warmup:
            times.append(dt)
            proposals.append(x)
            steps.append(s.t)
    return times, proposals, steps


def refactor_append(gp, x, y: float, t: float) -> None:
    """`ExactGP.append` done the slow way: a full refactorization of all n + 1 points."""
    import numpy as np

    gp.fit(np.vstack([gp.X_, np.reshape(x, (1, -1))]), np.append(gp.y_, y), np.append(gp.times_, t))


def told_copy(base, x, y: float, refactor: bool):
    """A copy of `base` told `(x, y)`, with the O(n^2) append or a full refactorization."""
    s = copy.deepcopy(base)
    if refactor:
        s.gp.append = functools.partial(refactor_append, s.gp)
    s.tell(x, y)
    return s


def time_tells(base, calls: int, warmup: int, refactor: bool, seed: int) -> list[float]:
    """Seconds per `tell()` on fresh copies of `base` (the copies are not timed)."""
    import numpy as np

    rng = np.random.default_rng([seed, 7])
    times = []
    for k in range(warmup + calls):
        s = copy.deepcopy(base)
        if refactor:
            s.gp.append = functools.partial(refactor_append, s.gp)
        x = rng.random(base.domain.dim)
        y = float(objective(x[None, :])[0])
        t0 = time.perf_counter()
        s.tell(x, y)
        dt = time.perf_counter() - t0
        if k >= warmup:
            times.append(dt)
    return times


def refactor_posterior_gap(base, seed: int = 0, m: int = 256) -> float:
    """Largest |difference| of posterior mean and variance between append and refactor tells."""
    import numpy as np

    rng = np.random.default_rng([seed, 8])
    x = rng.random(base.domain.dim)
    y = float(objective(x[None, :])[0])
    a, b = told_copy(base, x, y, False), told_copy(base, x, y, True)
    Q = rng.random((m, base.domain.dim))
    (ma, va), (mb, vb) = a.gp.predict(Q, float(a.t)), b.gp.predict(Q, float(b.t))
    return float(max(np.abs(ma - mb).max(), np.abs(va - vb).max()))


def measure_one(d: int, n: int, st: dict, others: dict | None = None) -> dict:
    """All measurements for one `(d, n)`: ask, tell, refactor tell, values, and the compared
    steps (`others`: name -> an object with `time_steps`, e.g. BoTorch's and the plain step)."""
    others = others or {}
    base = build_strategy(d, n, st["seed"], st.get("polish"), st.get("tolerance"))
    ask_s, proposals, steps = time_asks(base, st["calls"], st["warmup"])
    sets = [proposals]
    row = {"d": d, "n": n, "lengthscale": lengthscale(d), "ask_ms": _percentiles(ask_s)}
    for name, other in others.items():
        o_s, o_props = other.time_steps(base, steps, st["warmup"])
        sets.append(o_props)
        row[f"{name}_ms"] = _percentiles(o_s)
    ratios = _value_ratios(base, steps, sets, st)
    row["ask_value_ratio"] = _ratio_summary(ratios[0])
    for name, r in zip(others, ratios[1:]):
        row[f"{name}_value_ratio"] = _ratio_summary(r)
    for key, refactor in (("tell_ms", False), ("tell_refactor_ms", True)):
        row[key] = _percentiles(time_tells(base, st["calls"], st["warmup"], refactor, st["seed"]))
    for name in others:
        row[f"{name}_over_ask"] = row[f"{name}_ms"]["p50"] / row["ask_ms"]["p50"]
        row[f"{name}_over_ask_tell"] = row[f"{name}_ms"]["p50"] / (
            row["ask_ms"]["p50"] + row["tell_ms"]["p50"])
    row["refactor_posterior_max_abs_diff"] = refactor_posterior_gap(base, st["seed"])
    return row


def measure(st: dict, log=lambda msg: None) -> dict:
    """Run every `(d, n)` of the settings; returns plain data (see `format_table`)."""
    import numpy as np
    import scipy

    others = {}
    if "botorch" in compared(st):
        from tvbod.bench.botorch_step import BoTorchStep

        others["botorch"] = BoTorchStep(NOISE_VARIANCE, lengthscale, _beta)
    if "numpy" in compared(st):
        from tvbod.bench.numpy_step import PlainStep

        others["numpy"] = PlainStep(NOISE_VARIANCE, lengthscale, _beta)
    load_before = os.getloadavg()
    rows = []
    for d in st["dims"]:
        for n in st["sizes"]:
            t0 = time.perf_counter()
            rows.append(measure_one(d, n, st, others))
            log(f"d={d} n={n}: {time.perf_counter() - t0:.1f} s")
    env = {"numpy": np.__version__, "scipy": scipy.__version__, "python": sys.version.split()[0],
           "cpus": os.cpu_count(), "blas_threads": {v: os.environ.get(v) for v in _THREAD_VARS},
           "loadavg_1min_before_after": [load_before[0], os.getloadavg()[0]]}
    if "botorch" in others:
        env.update(others["botorch"].versions)
    return {"settings": st, "environment": env, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tvbod bench latency", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
