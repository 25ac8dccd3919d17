"""The results blocks of README.md and docs/benchmarks.md, each rendered from docs/results/*.json.

`render(name, root)` returns the Markdown of block `name`. Names of the form `setup-SUMMARY`
render a suite summary's run counts inline (`runs-SUMMARY` a within-model one's), `source-SUMMARY`
the command and commit that produced it; every other name is a table or a sentence of `RENDERERS`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

#: Where the summaries live, relative to the repository root.
RESULTS = "docs/results"

#: Steps after the change within which a reset counts as the change caught (the suite's window).
WINDOW = 5


def load(root: Path, name: str) -> dict:
    """The summary docs/results/NAME.json (its `command`, `commit` and `results`)."""
    return json.loads((root / RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _cells(root: Path, name: str) -> list[dict]:
    return load(root, name)["results"]["cells"]


def _rt(c: dict) -> str:
    lo, hi = c["R_T_ci95"]
    return f"{c['R_T_mean']:.1f} [{lo:.1f}, {hi:.1f}]"


def _caught(c: dict) -> str:
    return "-" if c.get("caught") is None else f"{c['caught']}/{c['runs']}"


def _opt(c: dict, key: str) -> str:
    v = c.get(key)
    return "-" if v is None else (f"{v}/{c['runs']}" if key == "false_reset_runs" else f"{v:g}")


#: The suite's row labels as a plant file's author reads them.
ROW_NAMES = {"ET-GP-UCB (shipped)": "the cart-pole file, box replaced",
             "ET-GP-UCB (bounds only)": "**bounds only (recommended)**",
             "ET-GP-UCB + safety": "**bounds + `safety:` (recommended)**",
             "GP-UCB + safety": "bounds + `safety:`, GP-UCB"}


def _row(c: dict) -> str:
    return ROW_NAMES.get(c["label"], c["label"])


def _cell_name(c: dict) -> str:
    return f"`{c['plant']}`, {c['drift']}"


# ---------------------------------------------------------------------------- the suite
def plants(root: Path) -> str:
    rows = [[f"`{p['plant']}`" if p["gains"] != "-" else p["plant"], p["split"], str(p["gains"]),
             p["drifts"]] for p in load(root, "suite-held-out")["results"]["split"]]
    return _table(["plant", "split", "gains", "drift kinds"], rows)


def _safety_rows(cells: list[dict]) -> list[list[str]]:
    return [[_cell_name(c), _row(c), _rt(c), _caught(c), _opt(c, "false_reset_runs"),
             str(c["catastrophic"]), f"{c['violations_per_1000']:.1f}"] for c in cells]


_SAFETY_HEADER = ["cell", "plant file", "R_T mean [95 % CI]", f"caught <= {WINDOW} steps",
                  "false-reset runs", "catastrophic episodes", "violations /1000"]


def held_out(root: Path) -> str:
    return _table(_SAFETY_HEADER, _safety_rows(_cells(root, "suite-held-out")))


def dev(root: Path) -> str:
    return _table(_SAFETY_HEADER, _safety_rows(_cells(root, "suite-dev")))


def peers(root: Path) -> str:
    cells = _cells(root, "suite-held-out-tunecontrol-peers") + _cells(
        root, "suite-held-out-ackley-peers")
    rows = [[_cell_name(c), _row(c), _rt(c), _caught(c), _opt(c, "false_reset_runs"),
             _opt(c, "max_resets")] for c in cells]
    return _table(["cell", "algorithm", "R_T mean [95 % CI]", f"caught <= {WINDOW} steps",
                   "false-reset runs", "most resets"], rows)


def no_change(root: Path) -> str:
    cells = [c for name in ("suite-held-out-tunecontrol", "suite-held-out-ackley")
             for c in _cells(root, name) if c["drift"] == "none"]
    rows = [[_cell_name(c), _row(c), _rt(c), _opt(c, "false_reset_runs"),
             _opt(c, "max_resets")] for c in cells]
    return _table(["cell", "plant file", "R_T mean [95 % CI]", "false-reset runs",
                   "most resets"], rows)


def headline(root: Path) -> str:
    by = {}
    for c in _cells(root, "suite-held-out"):
        by.setdefault((c["plant"], c["drift"]), {})[c["label"]] = c
    rows = []
    for (plant, drift), row in by.items():
        b, s, cp = (row["ET-GP-UCB (bounds only)"], row["ET-GP-UCB + safety"],
                    row["ET-GP-UCB (shipped)"])
        rows.append([f"`{plant}`, {drift}", f"{b['R_T_mean']:.1f} ({b['catastrophic']})",
                     f"**{s['R_T_mean']:.1f}** ({s['catastrophic']})",
                     f"{cp['R_T_mean']:.1f} ({cp['catastrophic']})"])
    return _table(["held-out cell", "bounds only: R_T (catastrophic episodes)",
                   "bounds + `safety:`", "the cart-pole file, box replaced"], rows)


# ---------------------------------------------------------------------------- safe cart-pole
def safe_cartpole(root: Path) -> str:
    res = load(root, "safe-cartpole")["results"]
    jump = res["jump_at"]
    rows = []
    for safe in (True, False):
        got = [r for r in res["rows"] if r["safety"] is safe]
        regret = [r["regret"] for r in got]
        caught = sum(any(jump <= t <= jump + WINDOW for t in r["resets"]) for r in got)
        false = sum(any(t < jump for t in r["resets"]) for r in got)
        rows.append(["with `safety:`" if safe else "without `safety:`", str(len(got)),
                     str(sum(r["catastrophic"] for r in got)),
                     f"{sum(r['catastrophic'] > 0 for r in got)}/{len(got)}",
                     f"{caught}/{len(got)}", f"{false}/{len(got)}",
                     f"{statistics.mean(regret):.1f} +- {statistics.stdev(regret):.1f}"])
    return _table(["`cartpole-safe`", "runs", "catastrophic episodes", "runs with one",
                   f"jump caught <= {WINDOW} steps", "false-reset runs", "R_T mean +- sd"], rows)


# ---------------------------------------------------------------------------- within-model
def within_model(root: Path) -> str:
    rows = []
    for case in load(root, "within-model")["results"]["cases"]:
        for a in case["algorithms"]:
            paper = a.get("paper")
            rows.append([f"{case['eps']:g}", a["label"],
                         f"{a['R_T_mean']:.1f} +- {a['R_T_std']:.1f}",
                         f"{a['resets_mean']:.2f}" if a["strategy"] == "et-gp-ucb" else "-",
                         "-" if not paper else f"{paper['R_T']:g} ({paper['resets']:g} resets)"])
    return _table(["eps", "algorithm", "R_T mean +- sd", "resets", "the paper's ET-GP-UCB"], rows)


def within_model_claims(root: Path) -> str:
    return "\n".join(f"- {'holds' if c['holds'] else '**fails**'}: {c['name']} ({c['detail']})"
                      for c in load(root, "within-model")["results"]["claims"])


# ---------------------------------------------------------------------------- speed
def latency(root: Path) -> str:
    res = load(root, "latency")["results"]
    rows = [[str(r["d"]), str(r["n"]), f"{r['ask_ms']['p50']:.2f}", f"{r['ask_ms']['p99']:.2f}",
             f"{r['tell_ms']['p50']:.2f}", f"{r['tell_refactor_ms']['p50']:.2f}",
             f"{r['numpy_ms']['p50']:.1f}", f"{r['numpy_over_ask_tell']:.1f}x",
             f"{r['ask_value_ratio']['worst']:.8f}"] for r in res["rows"]]
    return _table(["d", "n", "ask p50 ms", "ask p99 ms", "tell p50 ms",
                   "tell by refactorization p50 ms", "plain numpy/scipy step p50 ms",
                   "numpy step / (ask + tell)", "worst ask value / dense reference"], rows)


def cartpole_step(root: Path) -> str:
    res = load(root, "cartpole-step")["results"]
    rows = [[str(r["n"]), f"{r['step_ms']['p50']:.1f}", f"{r['step_ms']['p99']:.1f}",
             f"{r['refit_ms']['p50']:.1f}", f"{r['ask_ms']['p50']:.1f}",
             f"{r['plants_per_core']:.0f}"] for r in res["rows"]]
    table = _table(["points in D", "step p50 ms", "step p99 ms", "MAP refit p50 ms",
                    "ask p50 ms", "plants per core at one step a second"], rows)
    return f"{table}\n\n(One-minute load average {res['load_average']:.2f} on the two cores.)"


def latency_load(root: Path) -> str:
    before, after = load(root, "latency")["results"]["environment"]["loadavg_1min_before_after"]
    return f"load average {before:.2f} before, {after:.2f} after"


def events(root: Path) -> str:
    res = load(root, "events")["results"]
    return _table(["log level", "events per second (best run)", "events per run"],
                  [[level, f"{v['events_per_s']:,.0f}", f"{v['file_lines']:,}"]
                   for level, v in res.items()])


def startup(root: Path) -> str:
    res = load(root, "startup")["results"]
    rows = [[f"`{case}`", str(v["plants"]), f"{v['median_s']:.2f}", f"{v['min_s']:.2f}"]
            for case, v in res["cases"].items()]
    table = _table(["case", "plants", "READY after, median s", "fastest s"], rows)
    imports = ", ".join(f"`{m}` {ms:.0f} ms" for m, ms in res["imports_ms"].items())
    return f"{table}\n\nImport times: {imports}."


def stopping_time(root: Path) -> str:
    rows = []
    for s in load(root, "stopping-time")["results"]["summary"]:
        q = s["quantiles"]
        rows.append([f"`{s['trigger']}`", f"{s['eps']:g}", str(s["runs"]),
                     f"{s['median']:g} ({s['mean']:.1f})", f"{q['0.05']:g} / {q['0.95']:g}",
                     str(s["N"]), f"{s['share_before_N']:.0%}"])
    return _table(["trigger", "eps", "runs", "tau median (mean)", "5 / 95 %", "R-GP-UCB N",
                   "runs with tau < N"], rows)


# ---------------------------------------------------------------------------- inline
def _setup(root: Path, name: str, per: str = "cell") -> str:
    cfg = load(root, name)["results"]["config"]
    return f"{cfg['runs']} runs per {per}, T = {cfg['horizon']}, master seed {cfg['seed']}"


def _source(root: Path, name: str) -> str:
    s = load(root, name)
    return f"`{s['command']}` (commit `{s['commit'][:10]}`, summary `docs/results/{name}.json`)"


RENDERERS: dict[str, Callable[[Path], str]] = {
    "plants": plants, "held-out": held_out, "dev": dev, "peers": peers,
    "no-change": no_change, "headline": headline, "safe-cartpole": safe_cartpole,
    "latency": latency, "latency-load": latency_load, "cartpole-step": cartpole_step, "events": events, "startup": startup,
    "stopping-time": stopping_time, "within-model": within_model,
    "within-model-claims": within_model_claims,
}


def render(name: str, root: Path) -> str:
    """The Markdown of results block `name`."""
    for prefix, fn in (("setup-", _setup), ("runs-", lambda r, n: _setup(r, n, "case")), ("source-", _source)):
        if name.startswith(prefix):
            return fn(root, name[len(prefix):])
    if name not in RENDERERS:
        raise KeyError(f"no results block named {name!r} (known: {sorted(RENDERERS)})")
    return RENDERERS[name](root)
