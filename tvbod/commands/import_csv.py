"""`tvbod import PLANT FILE [--config DAEMON_FILE] [--append]`: seed a plant's state offline from
the rows of `tvbod export`, as CSV or JSON lines.

The format is told by the content (a first character `{` is JSON lines, anything else CSV with a
header row) and named in the output. Every gain by name and `measurement` are required; `t` and
`proposal_id` are optional; the other columns are ignored. Each row becomes one observation,
journaled and applied exactly like an `observe` request (docs/protocol.md): through the event
trigger, one step each, numbered from the plant's next step on, in file order (a `t` column must
be strictly increasing). So `export` of a plant, then `import` into a fresh state directory with
the same plant file, reproduces its dataset, resets and trigger values step for step (proposal
ids become `PLANT:t.observed`; the row's own id is kept in the observation's metadata as
`source_proposal_id`).

Import is idempotent: a row the plant already holds is skipped and counted, not imported again.
A row with a `proposal_id` is held when the plant's history has a measurement with that id, or
one imported from a row with that id; a row without one but with a `t` is held when the plant
has done step t. `--append` imports every row all the same. The whole file is checked before
anything is written; a running daemon holds the state directory's lock and makes the import
refuse (use `observe` then).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvbod.errors import TvbodError
from tvbod.service.daemon_file import CONFIG_HELP

_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no", ""}
CSV, JSONL = "CSV", "JSON lines"


class ImportError_(TvbodError):  # noqa: N801 - not the builtin ImportError
    """One line for the user; nothing was written."""


@dataclass(frozen=True)
class Row:
    """One checked row: where it was, the point, the measurement, and what identifies it."""

    line: int
    gains: dict[str, float]
    measurement: float
    proposal_id: str | None
    t: int | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant", help="plant name (in the daemon file's plants)")
    parser.add_argument("file", type=Path,
                        help="the rows of tvbod export: CSV or JSON lines (told by the content)")
    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)
    parser.add_argument("--append", action="store_true",
                        help="import rows the plant already holds (by proposal_id or step) again, "
                        "as new steps; without it they are skipped and counted")


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ImportError_(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise ImportError_(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ImportError_(f"{where}: {value!r} is not a finite number")
    return number


def _step(value: Any, where: str) -> int | None:
    """The row's `t`: None when absent or empty, else a whole number >= 1."""
    if value is None or value == "":
        return None
    number = _finite(value, where)
    if number != int(number) or number < 1:
        raise ImportError_(f"{where}: {value!r} is not a step number (1, 2, ...)")
    return int(number)


def _flag(value: Any, where: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if not isinstance(value, str) or value.strip().lower() not in _TRUE | _FALSE:
        raise ImportError_(f"{where}: {value!r} is not true or false")
    return value.strip().lower() in _TRUE


def _read_text(path: Path) -> str:
    kind = JSONL if path.suffix in (".jsonl", ".json") else CSV
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportError_(f"{path}: cannot read the {kind}: {exc}") from None


def records(path: Path, needed: list[str]) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    """`(format, [(line number, raw row)])` of the file; `needed`: the columns every row must have."""
    text = _read_text(path)
    if text.lstrip()[:1] == "{":
        return JSONL, _jsonl_records(path, text, needed)
    return CSV, _csv_records(path, text, needed)


def _missing(present, needed: list[str], where: str, kind: str) -> None:
    missing = [c for c in needed if c not in present]
    if missing:
        raise ImportError_(f"{where}: missing column(s) {', '.join(missing)} (needed: "
                           f"{', '.join(needed)}; as tvbod export writes, read as {kind})")


def _csv_records(path: Path, text: str, needed: list[str]) -> list[tuple[int, dict[str, Any]]]:
    try:
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or []
        _missing(header, needed, str(path), CSV)
        raw = list(reader)
    except csv.Error as exc:
        raise ImportError_(f"{path}: cannot read the CSV: {exc}") from None
    if not raw:
        raise ImportError_(f"{path}: no rows after the header; nothing to import")
    out = []
    for line, row in enumerate(raw, start=2):
        if None in row or any(v is None for v in row.values()):
            raise ImportError_(f"{path} line {line}: {len(header)} fields expected")
        out.append((line, row))
    return out


def _jsonl_records(path: Path, text: str, needed: list[str]) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as exc:
            raise ImportError_(f"{path} line {line}: not JSON ({exc.args[0].split(':')[0]}); "
                               f"read as {JSONL}, one object per line") from None
        if not isinstance(row, dict):
            raise ImportError_(f"{path} line {line}: a JSON {type(row).__name__}, not an object; "
                               f"read as {JSONL}, one object per line")
        _missing(row, needed, f"{path} line {line}", JSONL)
        out.append((line, row))
    return out


def read_rows(path: Path, config) -> tuple[str, list[Row]]:
    """`(format, rows)` from the file, every row checked against the plant's parameters."""
    from tvbod.core import make_strategy
    from tvbod.protocol import ProtocolError
    from tvbod.service.measurement_checks import observation_point

    names = [p.name for p in config.parameters]
    kind, raw = records(path, [*names, "measurement"])
    strategy = make_strategy(config.optimizer)
    rows, last_t = [], None
    for line, row in raw:
        where = f"{path} line {line}"
        t = _step(row.get("t"), f"{where}, column t")
        if t is not None:
            if last_t is not None and t <= last_t:
                raise ImportError_(f"{where}: t = {t} does not follow {last_t}; rows must be in "
                                   "step order")
            last_t = t
        _flag(row.get("failed"), f"{where}, column failed")
        gains = {n: _finite(row[n], f"{where}, column {n}") for n in names}
        try:
            observation_point(config, strategy, gains)
        except ProtocolError as exc:
            raise ImportError_(f"{where}: {exc.message}") from None
        pid = row.get("proposal_id")
        if pid is not None and not isinstance(pid, str):
            raise ImportError_(f"{where}, column proposal_id: {pid!r} is not a string")
        rows.append(Row(line, gains, _finite(row["measurement"], f"{where}, column measurement"),
                        pid or None, t))
    return kind, rows


def held_ids(plant_dir: Path) -> set[str]:
    """Proposal ids the plant holds: of its measurements, and of the rows it imported."""
    from tvbod.service.event_files import read_history

    ids: set[str] = set()
    for e in read_history(plant_dir):
        if e.get("event") != "measurement":
            continue
        ids.add(str(e.get("proposal_id")))
        source = (e.get("metadata") or {}).get("source_proposal_id")
        if isinstance(source, str):
            ids.add(source)
    return ids


def split_held(rows: list[Row], ids: set[str], next_t: int) -> tuple[list[Row], dict[str, int]]:
    """`(rows to import, {"proposal_id": n, "step": n} skipped)`: a row is held by its id when it
    has one, else by its step (the plant has done steps 1..next_t-1); repeats within the file
    count as held too."""
    seen, new, skipped = set(ids), [], {"proposal_id": 0, "step": 0}
    for row in rows:
        if row.proposal_id is not None:
            if row.proposal_id in seen:
                skipped["proposal_id"] += 1
                continue
            seen.add(row.proposal_id)
        elif row.t is not None and row.t < next_t:
            skipped["step"] += 1
            continue
        new.append(row)
    return new, skipped


def apply_rows(config, plant: str, rows: list[Row], source: str, append: bool) -> dict[str, Any]:
    """Restore the state directory (taking the daemon's lock), observe every row the plant does
    not hold yet (every row with `append`), checkpoint."""
    from tvbod.service.events import EventSink, configure_logging
    from tvbod.service.measurement_checks import observation_point
    from tvbod.service.server import Server

    configure_logging("console", stream=sys.stderr, level="warning")
    server = Server(config, EventSink())
    try:
        server.open()
        if plant in server.quarantined:
            raise ImportError_(f"plant {plant!r} is quarantined ({server.quarantined[plant]}); "
                               "nothing was imported")
        runtime = server.plants[plant]
        if runtime.proposal is not None:
            raise ImportError_(f"plant {plant!r} has proposal {runtime.proposal['id']!r} pending; "
                               "let the daemon finish it first; nothing was imported")
        first = runtime.strategy.t
        todo, skipped = ((rows, {"proposal_id": 0, "step": 0}) if append else
                         split_held(rows, held_ids(runtime.store.directory), first))
        resets, tag = [], uuid.uuid4().hex[:8]
        for i, row in enumerate(todo):
            x = observation_point(runtime.config, runtime.strategy, row.gains)
            metadata = {"imported_from": source, **({"source_proposal_id": row.proposal_id}
                                                    if row.proposal_id else {})}
            applied = runtime.record_observation(x, row.measurement, metadata,
                                                 f"import-{tag}-{i}", "import")
            if applied.result.reset:
                resets.append(applied.result.t)
            if runtime.checkpointer.due:
                runtime.store.journal.sync()
                runtime.checkpoint("periodic")
        runtime.store.journal.sync()
        return {"first": first, "last": runtime.strategy.t - 1, "resets": resets,
                "imported": len(todo), "skipped": skipped,
                "dataset_size": runtime.strategy.dataset_size,
                "directory": runtime.store.directory}
    finally:
        server.shutdown()


def summary(done: dict[str, Any], kind: str, path: Path, rows: int) -> str:
    """What the import did, in one line: imported and skipped counts, the steps, the format."""
    held = done["skipped"]
    skipped = held["proposal_id"] + held["step"]
    why = (f"{skipped} skipped, already in the plant (by proposal_id {held['proposal_id']}, by "
           f"step {held['step']}; --append imports them again)" if skipped else "0 skipped")
    if not done["imported"]:
        return (f"tvbod import: 0 observations into {done['directory']}: all {rows} rows of "
                f"{path.name} ({kind}) are already in the plant; {why}")
    return (f"tvbod import: {done['imported']} observations into {done['directory']} as steps "
            f"t={done['first']}..{done['last']}; |D| = {done['dataset_size']}, resets at "
            f"{done['resets'] or 'no step'}; {why}; read {path.name} as {kind}")


def run(args: argparse.Namespace) -> int:
    from tvbod.service.config import ConfigError, load_daemon_config
    from tvbod.service.recovery import RestoreError
    from tvbod.service.server import DaemonLockedError

    try:
        config = load_daemon_config(args.config)
        try:
            plant = config.plant(args.plant)
        except KeyError:
            raise ImportError_(f"no plant named {args.plant!r} in {config.path}; it has "
                               f"{', '.join(p.name for p in config.plants)}") from None
        kind, rows = read_rows(args.file, plant)
        done = apply_rows(config, args.plant, rows, args.file.name, args.append)
    except (ImportError_, ConfigError, DaemonLockedError, RestoreError) as exc:
        print(f"tvbod import: {exc}", file=sys.stderr)
        return 2
    print(summary(done, kind, args.file, len(rows)))
    return 0
