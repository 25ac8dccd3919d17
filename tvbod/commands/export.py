"""`tvbod export STATE/plants/P --format csv|jsonl [--out FILE]`: a plant's history, one row per step.

Columns: `t, proposal_id, <each gain by name>, measurement, failed, psi, threshold, reset,
dataset_size, wall_time`. `measurement` is the value the optimizer used (for a failed experiment
the failure policy's substitute), `psi`/`threshold` are the trigger's quantities on the GP scale
(empty in CSV / null in JSON when the strategy has no trigger), `wall_time` is when the daemon
recorded the measurement (ISO 8601, UTC). A history with a step missing is refused (exit 1,
naming the steps and the files). The source is the plant's event files, read only:
it works on a live state directory and changes nothing. `pandas.read_csv(FILE)` and
`pandas.read_json(FILE, lines=True)` read the output with no options; `tvbod import` reads the CSV.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

TAIL = ("measurement", "failed", "psi", "threshold", "reset", "dataset_size", "wall_time")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant_dir", type=Path, help="a plant's state directory (STATE/plants/NAME)")
    parser.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    parser.add_argument("--out", type=Path, help="write here (default: standard output)")


def _number(value: Any) -> float | None:
    """A float, or None for the NaN/infinity spellings the event log uses."""
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def rows(plant_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """`(columns, one dict per step)` from the plant's measurement events; raises
    `replay.HistoryGap` when a step is missing (an export never skips one silently)."""
    from tvbod.commands.replay import checked_history

    history, _, _ = checked_history(plant_dir)
    names = list(history[0]["gains"]) if history else []
    out = []
    for e in history:
        row = {"t": e["t"], "proposal_id": e["proposal_id"], **e["gains"],
               "measurement": e["measurement"], "failed": bool(e["failed"]),
               "psi": _number(e.get("psi")), "threshold": _number(e.get("threshold")),
               "reset": bool(e["reset"]), "dataset_size": e["dataset_size"],
               "wall_time": e.get("timestamp")}
        out.append(row)
    return ["t", "proposal_id", *names, *TAIL], out


def render(columns: list[str], data: list[dict[str, Any]], fmt: str) -> str:
    buf = io.StringIO()
    if fmt == "jsonl":
        for row in data:
            buf.write(json.dumps(row, allow_nan=False) + "\n")
        return buf.getvalue()
    writer = csv.DictWriter(buf, columns, lineterminator="\n")
    writer.writeheader()
    for row in data:
        writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v)
                         for k, v in row.items()})
    return buf.getvalue()


def run(args: argparse.Namespace) -> int:
    events = args.plant_dir / "events.jsonl"
    if not events.is_file():
        print(f"tvbod export: {events} not found (give a plant's state directory, "
              "STATE/plants/NAME)", file=sys.stderr)
        return 2
    from tvbod.commands.replay import HistoryGap

    try:
        columns, data = rows(args.plant_dir)
    except HistoryGap as exc:
        print(f"tvbod export: {exc}; nothing written", file=sys.stderr)
        return 1
    if not data:
        print(f"tvbod export: {args.plant_dir} has no recorded measurements; nothing written",
              file=sys.stderr)
        return 2
    text = render(columns, data, args.format)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    tmp = args.out.with_name(f".{args.out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        print(f"tvbod export: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"tvbod export: {len(data)} steps of {args.plant_dir.name} -> {args.out}", file=sys.stderr)
    return 0
