"""`tvbod bench latency`'s output: the markdown table of one run and latency.png."""

from __future__ import annotations

import sys
from pathlib import Path

from tvbod.core.optimize import TOLERANCE

from .latency_goals import ratio_text


def compared(st: dict) -> list[str]:
    """The `--compare` anchors of the settings `st`."""
    return (st.get("compare") or "").split(",") if st.get("compare") else []


def ratio_cell(summary: dict) -> str:
    """`median (worst)` of a value/ref summary, `-` without samples."""
    if not summary["count"]:
        return "-"
    return f"{ratio_text(summary['median'])} ({ratio_text(summary['worst'])})"


def format_table(result: dict) -> str:
    """The markdown table of one run."""
    others = compared(result["settings"])
    head = ["d", "n", "ask p50 ms", "ask p99 ms", "ask value/ref med (worst)", "tell p50 ms",
            "tell p99 ms", "refactor tell p50 ms", "refactor tell p99 ms", "refactor/append"]
    for name in others:
        head += [f"{name} p50 ms", f"{name} p99 ms", f"{name} value/ref med (worst)",
                 f"{name}/ask", f"{name}/(ask+tell)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in result["rows"]:
        cells = [str(r["d"]), str(r["n"]), f"{r['ask_ms']['p50']:.2f}", f"{r['ask_ms']['p99']:.2f}",
                 ratio_cell(r["ask_value_ratio"]), f"{r['tell_ms']['p50']:.3f}",
                 f"{r['tell_ms']['p99']:.3f}", f"{r['tell_refactor_ms']['p50']:.3f}",
                 f"{r['tell_refactor_ms']['p99']:.3f}",
                 f"{r['tell_refactor_ms']['p50'] / r['tell_ms']['p50']:.1f}x"]
        for name in others:
            cells += [f"{r[name + '_ms']['p50']:.1f}", f"{r[name + '_ms']['p99']:.1f}",
                      ratio_cell(r[name + "_value_ratio"]), f"{r[name + '_over_ask']:.2f}x",
                      f"{r[name + '_over_ask_tell']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    st = result["settings"]
    load = result["environment"]["loadavg_1min_before_after"]
    lines.append(
        f"\nSE lengthscale 0.2 sqrt(d), noise variance 0.02, default budget (polish: "
        f"{st.get('polish') or 'lbfgsb-joint'}, tolerance: "
        f"{TOLERANCE if st.get('tolerance') is None else st['tolerance']:g}); "
        f"{st['calls']} timed "
        f"calls after {st['warmup']} warm-up per cell (p99 of so few calls ~ the slowest); "
        f"value/ref over {st['ref_calls']} calls against {st['ref_candidates']} Sobol points + "
        f"L-BFGS-B from the best {st['ref_starts']}; one BLAS thread; load average "
        f"{load[0]:.2f} -> {load[1]:.2f} on {result['environment']['cpus']} CPUs.")
    return "\n".join(lines)


def plot_latency(result: dict, path: Path) -> None:
    """latency.png: ask, tell and refactor tell p50 against n, one panel per d (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no latency.png: matplotlib is not installed (pip install 'tvbod[plots]')",
              file=sys.stderr)
        return
    dims = sorted({r["d"] for r in result["rows"]})
    fig, axes = plt.subplots(1, len(dims), figsize=(3.2 * len(dims), 3.2), sharey=True, squeeze=False)
    series = [("ask_ms", "ask"), ("tell_ms", "tell"), ("tell_refactor_ms", "tell, refactor"),
              ("botorch_ms", "BoTorch step")]
    for ax, d in zip(axes[0], dims):
        rows = [r for r in result["rows"] if r["d"] == d]
        for key, label in series:
            if key in rows[0]:
                ax.plot([r["n"] for r in rows], [r[key]["p50"] for r in rows], "o-", label=label)
        ax.set(xscale="log", yscale="log", xlabel="n", title=f"d = {d}")
    axes[0][0].set_ylabel("p50 latency, ms")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize="small")
    fig.savefig(path, dpi=110)
    plt.close(fig)
