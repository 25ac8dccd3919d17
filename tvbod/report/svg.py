"""Charts as inline SVG text: what the HTML report draws, with nothing but the standard library.

A chart is a set of `Series` (dots, crosses or a line over the step axis) and vertical `Marker`s
(a reset, a regime change) on shared axes with ticks, a legend and native tooltips (`<title>`),
so the page needs no script and no network. Long histories are thinned to a bounded number of
points per series (`thin`) keeping each bucket's extremes, so a spike stays visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Sequence

#: Points per series above which a series is thinned to its buckets' minima and maxima.
MAX_POINTS = 4000
#: Colours (the matplotlib "tab10" palette) by role, so every chart speaks one language.
COLORS = {"data": "#1f77b4", "limit": "#ff7f0e", "best": "#2ca02c", "reset": "#d62728",
          "violation": "#d62728", "failed": "#000000", "regime": "#444444", "other": "#9467bd"}
_PAD = {"left": 64, "right": 16, "top": 26, "bottom": 34}


@dataclass(frozen=True)
class Series:
    """`y` over `x`; a non-finite y is a gap. `kind`: "dots", "crosses" or "line"."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    kind: str = "dots"
    color: str = COLORS["data"]


@dataclass(frozen=True)
class Marker:
    """A vertical line at step `x`: `role` "reset" (solid) or "regime" (dashed); `note` is the
    tooltip."""

    x: float
    role: str
    note: str


@dataclass(frozen=True)
class Axes:
    """Data range to pixels for one chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int
    height: int
    log_y: bool = False
    ticks_y: list[float] = field(default_factory=list)

    def px(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return _PAD["left"] + (x - self.x0) / span * (self.width - _PAD["left"] - _PAD["right"])

    def py(self, y: float) -> float:
        lo, hi, v = self.y0, self.y1, y
        if self.log_y:
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(y)
        span = (hi - lo) or 1.0
        inner = self.height - _PAD["top"] - _PAD["bottom"]
        return _PAD["top"] + (1.0 - (v - lo) / span) * inner


def thin(x: Sequence[float], y: Sequence[float], limit: int = MAX_POINTS):
    """At most about `limit` points: the lowest and highest y of each of `limit // 2` buckets of
    consecutive points (non-finite y dropped)."""
    pts = [(a, b) for a, b in zip(x, y) if b is not None and math.isfinite(b)]
    if len(pts) <= limit:
        return pts
    size = math.ceil(len(pts) / (limit // 2))
    out = []
    for i in range(0, len(pts), size):
        bucket = pts[i:i + size]
        lo, hi = min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + 1e-9 * step:
        ticks.append(0.0 if abs(v) < 1e-12 * step else v)
        v += step
    return ticks


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def fmt(v: float) -> str:
    """A tick or tooltip number in at most 4 significant digits."""
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.2g}"
    return f"{v:.4g}"


def _axes(series: Sequence[Series], markers: Sequence[Marker], width: int, height: int,
          log_y: bool) -> Axes | None:
    xs = [a for s in series for a, _ in thin(s.x, s.y)] + [m.x for m in markers]
    ys = [b for s in series for _, b in thin(s.x, s.y) if not log_y or b > 0]
    if not xs or not ys:
        return None
    y0, y1 = min(ys), max(ys)
    if log_y:
        ticks = _log_ticks(y0, y1)
        y0, y1 = ticks[0], ticks[-1] if ticks[-1] > ticks[0] else ticks[0] * 10
    else:
        pad = (y1 - y0) * 0.05 or (abs(y0) * 0.1 or 1.0)
        ticks = nice_ticks(y0 - pad, y1 + pad)
        y0, y1 = min(ticks[0], y0 - pad), max(ticks[-1], y1 + pad)
    return Axes(min(xs), max(xs), y0, y1, width, height, log_y, ticks)


def _frame(ax: Axes, title: str, y_label: str, x_label: str) -> list[str]:
    right, bottom = ax.width - _PAD["right"], ax.height - _PAD["bottom"]
    out = [f'<rect x="{_PAD["left"]}" y="{_PAD["top"]}" width="{right - _PAD["left"]}" '
           f'height="{bottom - _PAD["top"]}" fill="#ffffff" stroke="#999999"/>',
           f'<text x="{_PAD["left"]}" y="16" class="chart-title">{escape(title)}</text>',
           f'<text x="{(right + _PAD["left"]) / 2:.1f}" y="{ax.height - 4}" '
           f'text-anchor="middle">{escape(x_label)}</text>',
           f'<text transform="translate(12 {(bottom + _PAD["top"]) / 2:.1f}) rotate(-90)" '
           f'text-anchor="middle">{escape(y_label)}</text>']
    for v in ax.ticks_y:
        y = ax.py(v)
        out.append(f'<line x1="{_PAD["left"]}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eeeeee"/><text x="{_PAD["left"] - 4}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{fmt(v)}</text>')
    for v in nice_ticks(ax.x0, ax.x1, 8):
        x = ax.px(v)
        out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{fmt(v)}</text>')
    return out


def _path(ax: Axes, s: Series) -> str:
    pts = [(ax.px(a), ax.py(b)) for a, b in thin(s.x, s.y) if not ax.log_y or b > 0]
    if s.kind == "line":
        d = "M" + " L".join(f"{x:.1f} {y:.1f}" for x, y in pts)
        return f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="1.5"/>'
    if s.kind == "crosses":
        d = "".join(f"M{x - 3:.1f} {y - 3:.1f}l6 6m0 -6l-6 6" for x, y in pts)
        return f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="1.5"/>'
    d = "".join(f"M{x:.1f} {y:.1f}h0" for x, y in pts)
    return (f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="3.5" '
            'stroke-linecap="round"/>')


def _marker(ax: Axes, m: Marker) -> str:
    x = ax.px(m.x)
    dash = ' stroke-dasharray="5 3"' if m.role == "regime" else ""
    color = COLORS["reset"] if m.role == "reset" else COLORS["regime"]
    return (f'<line class="{m.role}-marker" x1="{x:.1f}" x2="{x:.1f}" y1="{_PAD["top"]}" '
            f'y2="{ax.height - _PAD["bottom"]}" stroke="{color}" stroke-width="1.2"{dash}>'
            f'<title>{escape(m.note)}</title></line>')


def _legend(series: Sequence[Series], markers: Sequence[Marker], width: int) -> list[str]:
    items = [(s.label, s.color, s.kind) for s in series]
    roles = {m.role for m in markers}
    items += [(name, COLORS[role], "line") for role, name in
              (("reset", "reset"), ("regime", "regime change")) if role in roles]
    out, x = [], width - _PAD["right"]
    for label, color, kind in reversed(items):
        x -= 14 + 7 * len(label)
        glyph = (f'<circle cx="{x + 4}" cy="12" r="3" fill="{color}"/>' if kind == "dots" else
                 f'<line x1="{x}" x2="{x + 9}" y1="12" y2="12" stroke="{color}" stroke-width="2"/>')
        out.append(f'{glyph}<text x="{x + 12}" y="16">{escape(label)}</text>')
    return out


def chart(series: Sequence[Series], markers: Sequence[Marker] = (), *, title: str, y_label: str,
          x_label: str = "step t", log_y: bool = False, width: int = 960,
          height: int = 230) -> str:
    """One chart as an `<svg>` element; a chart with no finite data says so instead."""
    ax = _axes(series, markers, width, height, log_y)
    head = (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="{escape(title)}">')
    if ax is None:
        return (head + f'<text x="{_PAD["left"]}" y="16" class="chart-title">{escape(title)}'
                '</text><text x="64" y="60">no data</text></svg>')
    body = _frame(ax, title, y_label, x_label)
    body += [_path(ax, s) for s in series]
    body += [_marker(ax, m) for m in markers]
    body += _legend(series, markers, width)
    return head + "".join(body) + "</svg>"
