"""Summaries, the printed table, the goal lines and the plot of the open-loop daemon benchmark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tvbod.bench.daemon_load import KINDS, LoadGenerator

#: The goals of the open-loop run (docs/benchmarks.md, *The daemon*).
ASK_READY_P99_MS = 5.0
TELL_P99_MS = 10.0
RSS_MB = 200.0


def latency(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ms = np.asarray(samples) * 1e3
    return {"count": int(ms.size), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}


def summarize_groups(gen: LoadGenerator, ph: dict[str, Any],
                     unanswered: dict[tuple[str, str], int]) -> dict[str, dict[str, Any]]:
    """Per plant group of one phase (`ph`, as `LoadGenerator` measured it): offered and achieved
    rates, missed slots, errors, dataset sizes at the phase's end, latency per request class."""
    phase, seconds = ph["phase"], ph["seconds"]
    out: dict[str, dict[str, Any]] = {}
    for group in sorted({p.spec.group for p in gen.plants}):
        members = [p for p in gen.plants if p.spec.group == group]
        counts: Counter = gen.rec.counts.get((phase, group), Counter())
        lat = {k: latency(gen.rec.samples.get((phase, group, k), [])) for k in KINDS}
        if not counts and not any(v["count"] for v in lat.values()):
            continue
        rate = members[0].spec.rate
        errors = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("error:")}
        out[group] = {
            "plants": len(members), "rate_hz": rate,
            "offered_steps_per_s": len(members) * rate,
            "steps_per_s": counts["steps"] / seconds if seconds > 0 else float("nan"),
            "slots": counts["slots"], "missed_slots": counts["missed_slots"],
            "steps": counts["steps"], "observed": counts["observed"], "resets": counts["resets"],
            "errors": errors, "unanswered": unanswered.get((phase, group), 0),
            "dataset_size_min_max": ph["dataset_size"].get(group),
            "latency": lat,
        }
    return out


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _lat(cell: dict[str, Any]) -> str:
    if not cell["count"]:
        return "-"
    return f"{_f(cell['p50_ms'])}/{_f(cell['p99_ms'])}/{_f(cell['max_ms'], 1)} ({cell['count']})"


def format_table(result: dict[str, Any]) -> str:
    """One row per (phase, group), then one line per phase with CPU and memory."""
    head = ("phase", "group", "plants x Hz", "n at end", "resets", "steps/s offered/done",
            "missed slots",
            "ask ready p50/p99/max ms (n)", "ask waiting", "tell", "observe", "errors",
            "unanswered")
    rows = [head]
    for ph in result["phases"]:
        for group, g in ph["groups"].items():
            lat = g["latency"]
            n = g["dataset_size_min_max"] or ["-", "-"]
            rows.append((ph["phase"], group, f"{g['plants']} x {g['rate_hz']:g}",
                         f"{n[0]}" if n[0] == n[1] else f"{n[0]}-{n[1]}", str(g["resets"]),
                         f"{g['offered_steps_per_s']:.0f}/{g['steps_per_s']:.1f}"
                         if ph["phase"] not in ("seed", "prime") else "-",
                         f"{g['missed_slots']}/{g['slots']}", _lat(lat["ask_ready"]),
                         _lat(lat["ask_waiting"]), _lat(lat["tell"]), _lat(lat["observe"]),
                         str(sum(g["errors"].values())), str(g["unanswered"])))
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in rows]
    for ph in result["phases"]:
        flag = "" if ph["complete"] else f"  INCOMPLETE: {ph['reason']}"
        lag = ("" if ph.get("slot_lag_p99_ms") is None else
               f" (slot lag p50/p99 {ph['slot_lag_p50_ms']:.1f}/{ph['slot_lag_p99_ms']:.1f} ms)")
        lines.append(f"{ph['phase']}: {ph['seconds']:.1f} s, daemon CPU "
                     f"{ph['daemon_cpu_pct']:.0f} % (its threads waited "
                     f"{ph['daemon_cpu_wait_s']:.1f} s for a CPU), generator CPU "
                     f"{ph['generator_cpu_pct']:.0f} %"
                     f"{lag}, daemon RSS {ph['rss_mb']:.0f} MB (peak {ph['hwm_mb']:.0f}){flag}")
    for start in result["starts"]:
        ready = "not READY" if start["ready_s"] is None else f"READY in {start['ready_s']:.2f} s"
        lines.append(f"daemon start ({start['what']}, {start['plants']} plants): {ready}")
    return "\n".join(lines)


def _worst(phase: dict[str, Any], kind: str, groups: set[str] | None = None) -> float | None:
    vals = [g["latency"][kind]["p99_ms"] for name, g in phase["groups"].items()
            if (groups is None or name in groups) and g["latency"][kind]["count"]]
    return max(vals) if vals else None


def goal_lines(result: dict[str, Any]) -> list[str]:
    """The issue's goals against this run: met / missed / not measured, with the numbers."""
    def verdict(value: float | None, limit: float) -> str:
        return "not measured" if value is None else ("met" if value <= limit else "missed")

    lines = []
    timed = [ph for ph in result["phases"] if ph["phase"] not in ("seed", "prime")]
    for ph in timed:
        ask, tell = _worst(ph, "ask_ready"), _worst(ph, "tell")
        lines.append(f"goal ask ready p99 <= {ASK_READY_P99_MS:g} ms ({ph['phase']}): "
                     f"{verdict(ask, ASK_READY_P99_MS)} ({_f(ask)} ms, worst group)")
        lines.append(f"goal tell p99 <= {TELL_P99_MS:g} ms incl. fsync ({ph['phase']}): "
                     f"{verdict(tell, TELL_P99_MS)} ({_f(tell)} ms, worst group)")
    probe = {ph["phase"]: ph for ph in timed if ph["phase"] in ("without", "with")}
    if len(probe) == 2:
        light = set(probe["without"]["groups"]) - {"probe"}
        for kind in ("ask_ready", "tell"):
            a, b = _worst(probe["without"], kind, light), _worst(probe["with"], kind, light)
            lines.append(f"refit probe, other plants' {kind} p99: {_f(a)} ms without, {_f(b)} ms "
                         "with one plant refitting")
    hwm = max((ph["hwm_mb"] for ph in result["phases"]), default=None)
    lines.append(f"goal daemon RSS <= {RSS_MB:g} MB with {result['plants']} plants: "
                 f"{verdict(hwm, RSS_MB)} (peak {_f(hwm, 0)} MB)")
    return lines


def plot(result: dict[str, Any], gen: LoadGenerator, out: Path) -> Path:
    """`latency.png`: the fraction of replies slower than x (log-log), one panel per phase."""
    from tvbod.bench.plots import panel_grid, save

    from matplotlib.ticker import NullFormatter

    phases = [ph["phase"] for ph in result["phases"]]
    fig, axes = panel_grid(len(phases), ncols=min(3, len(phases)))
    for ax, phase in zip(axes, phases):
        for (ph, group, kind), samples in sorted(gen.rec.samples.items()):
            if ph != phase or not samples:
                continue
            ms = np.sort(np.asarray(samples) * 1e3)
            tail = 1.0 - np.arange(ms.size) / ms.size
            ax.step(ms, tail, where="post", lw=1.2, label=f"{group} {kind}")
        ax.set(xscale="log", yscale="log", title=phase, xlabel="reply latency [ms]",
               ylabel="fraction slower")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    return save(fig, out / "latency.png")
