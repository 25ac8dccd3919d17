"""A plant's report as one self-contained HTML page: inline SVG charts, tables, no script.

The page loads nothing: a Content-Security-Policy forbids every fetch and every script, so it
reads the same offline, from a mail attachment or a wheel install without extras. The steps it
draws are also embedded as JSON (`<script type="application/json" id="tvbod-report-data">`, data
the browser never runs) for a reader who wants the numbers behind a chart.
"""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from typing import Any

from tvbod.report.data import PlantReport, Step, details
from tvbod.report.svg import COLORS, Marker, Series, chart, fmt

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_STYLE = """
body{font:14px/1.45 "Liberation Sans",Arial,sans-serif;color:#222;margin:24px auto;max-width:1000px}
h1{margin:0 0 4px}h2{margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#666}.banner{padding:8px 12px;margin:10px 0;border-radius:4px}
.error{background:#fde2e1;border:1px solid #d62728}.note{background:#fff4d6;border:1px solid #e0b000}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}th{background:#f6f6f6}td.num{text-align:right;
font-variant-numeric:tabular-nums}
svg.chart{display:block;margin:8px 0;font:11px "Liberation Sans",Arial,sans-serif}
.chart-title{font-weight:bold;font-size:12px}pre{background:#f6f6f6;padding:10px;overflow:auto}
tr.reset td:first-child{border-left:4px solid #d62728}
"""


def render(report: PlantReport, version: str) -> str:
    """The whole page."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    steps = report.steps
    span = f"steps {steps[0].t}..{steps[-1].t}" if steps else "no steps recorded"
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>tvbod report: {escape(report.plant)}</title><style>{_STYLE}</style></head><body>",
        f'<h1 id="plant-name">{escape(report.plant)}</h1>',
        f'<p class="meta">{escape(report.description)}</p>' if report.description else "",
        f'<p class="meta">{escape(report.directory)} &middot; {span} &middot; sense: '
        f"{escape(report.sense)} &middot; generated {now} by tvbod {escape(version)}</p>",
        *_banners(report), _summary(report), _best(report), *_charts(report), _events(report),
        "<h2>Configuration</h2>", f'<p class="meta">{escape(report.configuration_source)}</p>',
        f"<pre>{escape(report.configuration)}</pre>", _data(report), "</body></html>"]
    return "\n".join(p for p in parts if p)


def _banners(report: PlantReport) -> list[str]:
    out = [f'<div class="banner error" id="restore-error">The daemon cannot restore this plant '
           f"and quarantines it: {escape(e)} (<code>tvbod repair</code>; docs/reliability.md, "
           "<em>Quarantine</em>)</div>" for e in report.restore_errors]
    return out + [f'<div class="banner note">{escape(n)}</div>' for n in report.notes]


def _rows(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in pairs)


def _summary(report: PlantReport) -> str:
    steps = report.steps
    resets = [s.t for s in steps if s.reset]
    shown = ", ".join(map(str, resets[:30])) + (" ..." if len(resets) > 30 else "")
    pairs = [("steps recorded", str(len(steps))),
             ("resets", f"{len(resets)}" + (f" at t = {shown}" if resets else "")),
             ("dataset points now", str(steps[-1].dataset_size) if steps else "0"),
             ("failed experiments", str(sum(s.failed for s in steps)))]
    if any(s.safe_fraction is not None for s in steps):
        hits = [s.t for s in steps if s.safety_violation]
        pairs.append(("safety violations", f"{len(hits)}" + (
            f" at t = {', '.join(map(str, hits[:30]))}" if hits else "")))
        pairs.append(("safe set now", f"{100 * (steps[-1].safe_fraction or 0):.1f} % of the box"))
    for r in report.regimes:
        pairs.append(("regime change", f"t = {r.t}: {escape(r.key)} {fmt_value(r.before)} "
                      f"&rarr; {fmt_value(r.after)}"))
    return f'<h2>Summary</h2><table id="summary">{_rows(pairs)}</table>'


def fmt_value(v: Any) -> str:
    return fmt(v) if isinstance(v, float) else escape(str(v))


def _best(report: PlantReport) -> str:
    b = report.best
    if b is None:
        return ("<h2>Deploy now</h2><p>No recommendation: the dataset is empty or the optimizer "
                "has no model.</p>")
    rows = "".join(
        f'<tr><td>{escape(k)}</td><td class="num">{fmt_value(v)}</td>'
        f"<td>{escape(report.units.get(k, ''))}</td></tr>" for k, v in b.gains.items())
    cert = ("" if b.certified in (None, True) else
            '<p class="banner error">Not certified safe: no point of the dataset is; these are '
            "the most certain gains.</p>")
    return (f'<h2>Deploy now</h2><table id="best"><tr><th>gain</th><th>value</th><th>unit</th>'
            f"</tr>{rows}</table><p>predicted measurement <b>{b.mean:.6g} &plusmn; "
            f"{b.std:.3g}</b> (posterior mean &plusmn; std for step {b.t}; these gains were "
            f"measured at step {b.measured_at}; {b.dataset_size} points in the dataset"
            f"{'; certified safe' if b.certified else ''})</p>{cert}")


def _markers(report: PlantReport) -> list[Marker]:
    out = [Marker(s.t, "reset", f"reset at t = {s.t}" + (f" ({s.test} test)" if s.test else ""))
           for s in report.steps if s.reset]
    return out + [Marker(r.t, "regime", f"t = {r.t}: {r.key} {r.before} -> {r.after}")
                  for r in report.regimes]


def _incumbent(steps: list[Step], sense: str) -> list[Step]:
    """Per step, the step with the best measurement since the last reset."""
    best, out = None, []
    for s in steps:
        if s.reset:
            best = None
        better = (best is None or best.measurement is None or (
            s.measurement is not None and (s.measurement < best.measurement if sense == "minimize"
                                           else s.measurement > best.measurement)))
        if not s.failed and s.measurement is not None and better:
            best = s
        out.append(best or s)
    return out


def _charts(report: PlantReport) -> list[str]:
    steps, marks = report.steps, _markers(report)
    t = [s.t for s in steps]
    ok = [s.measurement if not (s.failed or s.safety_violation) else None for s in steps]
    series = [Series("measurement", t, ok)]
    series += [Series("failed (recorded value)", t,
                      [s.measurement if s.failed else None for s in steps], "crosses",
                      COLORS["failed"]),
               Series("safety violation", t, [s.measurement if s.safety_violation and not s.failed
                                              else None for s in steps], "crosses",
                      COLORS["violation"])]
    out = ["<h2>Measurements and the event trigger</h2>",
           chart([s for s in series if any(v is not None for v in s.y)], marks,
                 title="measurement per step (resets solid red, regime changes dashed)",
                 y_label="measurement")]
    if any("regret" in s.metadata for s in steps):
        total, avg = 0.0, []
        for i, s in enumerate(steps, 1):
            total += float(s.metadata.get("regret") or 0.0)
            avg.append(total / i)
        out.append(chart([Series("R_t / t", t, avg, "line")], marks,
                         title="average regret (from the adapter's metadata)", y_label="R_t / t"))
    out.append(chart([Series("psi = |y - mu|", t, [s.psi for s in steps]),
                      Series("threshold", t, [s.threshold for s in steps], "line",
                             COLORS["limit"])], marks, log_y=True,
                     title="point test: |y_t - mu_D(x_t)| against sqrt(rho_t') sigma_D(x_t) + "
                     "wbar_t' (GP scale)", y_label="GP scale"))
    if any(s.window_psi is not None and s.window_psi > 0 for s in steps):
        out.append(chart([Series("|sum e| over the window", t, [s.window_psi for s in steps]),
                          Series("threshold", t, [s.window_threshold for s in steps], "line",
                                 COLORS["limit"])], marks, log_y=True,
                         title="window test: |sum of residuals| against its threshold (GP scale)",
                         y_label="GP scale"))
    return out + _gain_charts(report, t, marks)


def _gain_charts(report: PlantReport, t: list[int], marks: list[Marker]) -> list[str]:
    steps = report.steps
    if not steps:
        return []
    inc = _incumbent(steps, report.sense)
    out = ["<h2>Gains</h2>"]
    for name in steps[-1].gains:
        unit = report.units.get(name)
        out.append(chart([Series("tried", t, [s.gains.get(name) for s in steps]),
                          Series("incumbent (best since the last reset)", t,
                                 [s.gains.get(name) for s in inc], "line", COLORS["best"])],
                         marks, title=f"{name}" + (f" [{unit}]" if unit else ""),
                         y_label=f"{name}" + (f" [{unit}]" if unit else ""), height=190))
    if any(s.safe_fraction is not None for s in steps):
        out += ["<h2>Safety</h2>", chart(
            [Series("safe set", t, [None if s.safe_fraction is None else 100 * s.safe_fraction
                                    for s in steps], "line")], marks,
            title="share of the gain box the safe set certifies", y_label="% of the box",
            height=190)]
    return out


def _events(report: PlantReport) -> str:
    rows = []
    for e in report.events[-1000:]:
        cls = ' class="reset"' if e.get("event") == "reset" else ""
        rows.append(f"<tr{cls}><td>{escape(str(e.get('t', '')))}</td>"
                    f"<td>{escape(str(e.get('event')))}</td><td>{escape(str(e.get('level')))}</td>"
                    f"<td>{escape(str(e.get('timestamp', '')))}</td><td>{escape(details(e))}</td></tr>")
    more = (f"<p>{len(report.events) - 1000} earlier events are in events.jsonl.</p>"
            if len(report.events) > 1000 else "")
    return ('<h2>Events</h2><table id="events"><tr><th>t</th><th>event</th><th>level</th>'
            f"<th>time</th><th>details</th></tr>{''.join(rows)}</table>{more}")


def _data(report: PlantReport) -> str:
    """The steps drawn, as JSON inside the page (`</` escaped so the data cannot end the tag)."""
    steps = [{"t": s.t, "proposal_id": s.proposal_id, **s.gains, "measurement": s.measurement,
              "failed": s.failed, "psi": s.psi, "threshold": s.threshold, "reset": s.reset,
              "dataset_size": s.dataset_size, "wall_time": s.wall_time,
              "window_psi": s.window_psi, "window_threshold": s.window_threshold,
              "safe_fraction": s.safe_fraction, "safety_violation": s.safety_violation}
             for s in report.steps]
    best = None if report.best is None else vars(report.best)
    text = json.dumps({"plant": report.plant, "steps": steps, "best": best}, allow_nan=False)
    text = text.replace("</", "<\\/")
    return f'<script type="application/json" id="tvbod-report-data">{text}</script>'
