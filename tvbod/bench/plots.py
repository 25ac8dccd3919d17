"""Shared matplotlib helpers for the benchmarks (Agg backend, imported lazily, small PNGs)."""

from __future__ import annotations

import math
from pathlib import Path

#: Resolution of every PNG: small enough to commit.
DPI = 90


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def panel_grid(n: int, ncols: int = 3, size: tuple[float, float] = (4.2, 3.2)):
    """A figure with `n` axes in rows of `ncols`; unused axes are hidden. Returns `(fig, axes)`."""
    plt = pyplot()
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows),
                             squeeze=False)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def within_model_figures(summary: list[dict], horizon: int, out: Path) -> list[Path]:
    """`regret.png` (mean `R_t / t` +- s.e.m. over runs per algorithm, one panel per case) and
    `resets.png` (reset steps of every run, one row per run, per algorithm that resets)."""
    t = list(range(1, horizon + 1))
    fig, axes = panel_grid(len(summary))
    for ax, case in zip(axes, summary):
        for a in case["algorithms"]:
            m, s = a["mean_R_t_over_t"], a["sem_R_t_over_t"]
            (line,) = ax.plot(t, m, lw=1.3, label=a["label"])
            ax.fill_between(t, [x - e for x, e in zip(m, s)], [x + e for x, e in zip(m, s)],
                            color=line.get_color(), alpha=0.2, lw=0)
        ax.set(title=case["case"], xlabel="t", ylabel="R_t / t", xlim=(1, horizon))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    paths = [save(fig, out / "regret.png")]

    resetting = [c for c in summary if any(sum(a["resets"]) for a in c["algorithms"])]
    if resetting:
        fig, axes = panel_grid(len(resetting), size=(4.8, 3.6))
        for ax, case in zip(axes, resetting):
            _reset_raster(ax, case, horizon)
        paths.append(save(fig, out / "resets.png"))
    return paths


def _reset_raster(ax, case: dict, horizon: int) -> None:
    """One row per run, runs grouped per algorithm; a tick at every reset step."""
    row, ticks, names = 0, [], []
    for a in case["algorithms"]:
        if not sum(a["resets"]):
            continue
        xs, ys = [], []
        for r, times in enumerate(a["reset_times"]):
            xs += times
            ys += [row + r] * len(times)
        ax.scatter(xs, ys, s=4, marker="|", linewidths=0.8)
        ticks.append(row + len(a["reset_times"]) / 2)
        names.append(f"{a['label'].replace(' (', chr(10) + '(')}\n{a['resets_mean']:.1f} per run")
        row += len(a["reset_times"]) + 3
    ax.set(title=f"resets, {case['case']}", xlabel="t", xlim=(0, horizon), ylim=(-2, row))
    ax.set_yticks(ticks, names, fontsize=6)
