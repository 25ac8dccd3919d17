"""`tvbod inspect PATH`: summarize a plant's checkpoint, journal and events without a daemon.

PATH is a state directory (every plant under `plants/`), one plant's directory, or a file inside
one. Nothing is modified: recovery runs on a temporary copy. Exits 1 when a plant cannot be
restored (the daemon quarantines it), naming why.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="state directory, plant directory or a file in one")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")


#: Files of which a plant directory holds at least one.
_PLANT_FILES = ("checkpoint", "checkpoint.prev", "journal", "journal.prev", "events.jsonl")


def is_plant_dir(path: Path) -> bool:
    from tvbod.service.event_files import has_history

    return any((path / name).exists() for name in _PLANT_FILES) or has_history(path)


def plant_dirs(path: Path) -> list[Path]:
    """The plant directories PATH designates (those holding a plant's files)."""
    path = path.resolve()
    if path.is_file():
        path = path.parent
    if (path / "plants").is_dir():
        return sorted(p for p in (path / "plants").iterdir() if p.is_dir() and is_plant_dir(p))
    return [path] if is_plant_dir(path) else []


def _offline(problem: str) -> str:
    """A recovery note as the daemon would act on it: inspect works on a copy and moves nothing."""
    return re.sub(r"; moved to (\S+)$", r"; the daemon would move it to \1 (nothing was moved)",
                  problem)


def summarize(plant_dir: Path) -> dict[str, Any]:
    """What recovery would find in `plant_dir` (run on a copy), plus the event log's history.
    `errors` lists what makes the plant unrestorable: the daemon quarantines such a plant."""
    from tvbod.service.event_files import history_files, read_history
    from tvbod.service.state_check import recovered_copy, restore_problems
    from tvbod.service.store import UnsupportedSchema

    try:
        rec = recovered_copy(plant_dir)
    except UnsupportedSchema as exc:
        return {"plant": plant_dir.name, "directory": str(plant_dir), "errors": [str(exc)]}
    errors, _ = restore_problems(plant_dir)
    state = rec.state or {}
    strat = state.get("strategy", {})
    kinds = Counter(r.get("kind") for r in rec.records_after_checkpoint)
    summary: dict[str, Any] = {
        "plant": plant_dir.name, "directory": str(plant_dir),
        "checkpoint": rec.source, "journal_seq_in_checkpoint": rec.journal_seq,
        "journal_records_after_checkpoint": dict(kinds),
        "errors": errors, "problems": [_offline(p) for p in rec.problems],
        "strategy": strat.get("strategy"), "t_at_checkpoint": strat.get("t"),
        "dataset_size_at_checkpoint": len(strat.get("gp", {}).get("y", [])),
        "resets_at_checkpoint": strat.get("resets"), "last_reset_t": strat.get("last_reset_t"),
        "pending_at_checkpoint": (state.get("proposal") or {}).get("id"),
        "tells_at_checkpoint": state.get("tells"), "failed_tells_at_checkpoint": state.get("failed_tells"),
    }
    tells = [r for r in rec.records_after_checkpoint if r.get("kind") in ("tell", "observe")]
    if tells:
        summary["last_journaled_tell_t"] = tells[-1]["t"]
    files = history_files(plant_dir)
    if files:
        events = read_history(plant_dir)
        seen, resets = set(), []
        for e in events:
            if e.get("event") == "measurement" and e.get("proposal_id") not in seen:
                seen.add(e.get("proposal_id"))
                if e.get("reset"):
                    resets.append(e.get("t"))
        summary["events"] = {"lines": len(events), "measurements": len(seen), "reset_steps": resets,
                             "files": [p.name for p in files],
                             "bytes": sum(p.stat().st_size for p in files)}
    return summary


def _print(summary: dict[str, Any]) -> None:
    print(f"plant {summary['plant']}  ({summary['directory']})")
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if key in ("plant", "directory"):
            continue
        print(f"  {key.ljust(width)}  {value}")


def run(args: argparse.Namespace) -> int:
    if not args.path.exists():
        print(f"tvbod inspect: {args.path} does not exist", file=sys.stderr)
        return 2
    dirs = plant_dirs(args.path)
    if not dirs:
        print(f"tvbod inspect: {args.path} is neither a state directory (with plants/) nor a "
              "plant's directory (checkpoint, journal, events.jsonl)", file=sys.stderr)
        return 2
    summaries = [summarize(d) for d in dirs]
    if args.json:
        print(json.dumps(summaries, indent=2, default=str))
    else:
        for s in summaries:
            _print(s)
    broken = [s["plant"] for s in summaries if s["errors"]]
    for s in summaries:
        for error in s["errors"]:
            print(f"tvbod inspect: plant {s['plant']} cannot be restored (the daemon quarantines "
                  f"it): {error}", file=sys.stderr)
    if broken:
        print(f"tvbod inspect: rebuild with `tvbod repair PLANT` ({', '.join(broken)}); "
              "docs/reliability.md, Quarantine", file=sys.stderr)
    return 1 if broken else 0
