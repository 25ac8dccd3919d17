"""`tvbod import PLANT FILE.csv [--config DAEMON_FILE]`: seed a plant's state offline from a CSV.

The CSV has the columns of `tvbod export` (a header row; every gain by name and `measurement` are
required, `t` is optional, the other columns are ignored). Each row becomes one observation,
journaled and applied exactly like an `observe` request (docs/protocol.md): through the event
trigger, one step each, numbered from the plant's next step on, in file order (a `t` column must
be strictly increasing). So `export` of a plant, then `import` into a fresh state directory with
the same plant file, reproduces its dataset, resets and trigger values step for step (proposal
ids become `PLANT:t.observed`). The whole file is checked before anything is written; a running
daemon holds the state directory's lock and makes the import refuse (use `observe` then).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import uuid
from pathlib import Path
from typing import Any

from tvbod.errors import TvbodError
from tvbod.service.daemon_file import CONFIG_HELP

_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no", ""}


class ImportError_(TvbodError):  # noqa: N801 - not the builtin ImportError
    """One line for the user; nothing was written."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plant", help="plant name (in the daemon file's plants)")
    parser.add_argument("file", type=Path, help="CSV with the columns of tvbod export")
    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)


def _finite(text: str, where: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ImportError_(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ImportError_(f"{where}: {text!r} is not a finite number")
    return value


def read_rows(path: Path, config) -> list[tuple[dict[str, Any], float]]:
    """`[(gains, measurement)]` from the CSV, every row checked against the plant's parameters."""
    from tvbod.core import make_strategy
    from tvbod.protocol import ProtocolError
    from tvbod.service.plant import observation_point

    names = [p.name for p in config.parameters]
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in (*names, "measurement") if c not in header]
            if missing:
                raise ImportError_(f"{path}: missing column(s) {', '.join(missing)} (needed: "
                                   f"{', '.join(names)}, measurement; as tvbod export writes)")
            raw = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ImportError_(f"{path}: cannot read the CSV: {exc}") from None
    if not raw:
        raise ImportError_(f"{path}: no rows after the header; nothing to import")
    strategy = make_strategy(config.optimizer)
    rows, last_t = [], None
    for line, row in enumerate(raw, start=2):
        where = f"{path} line {line}"
        if None in row or any(v is None for v in row.values()):
            raise ImportError_(f"{where}: {len(header)} fields expected")
        if "t" in row and row["t"] != "":
            t = _finite(row["t"], f"{where}, column t")
            if last_t is not None and t <= last_t:
                raise ImportError_(f"{where}: t = {row['t']} does not follow {last_t:g}; rows "
                                   "must be in step order")
            last_t = t
        failed = row.get("failed", "").strip().lower()
        if failed not in _TRUE | _FALSE:
            raise ImportError_(f"{where}, column failed: {row['failed']!r} is not true or false")
        gains = {n: _finite(row[n], f"{where}, column {n}") for n in names}
        try:
            observation_point(config, strategy, gains)
        except ProtocolError as exc:
            raise ImportError_(f"{where}: {exc.message}") from None
        rows.append((gains, _finite(row["measurement"], f"{where}, column measurement")))
    return rows


def apply_rows(config, plant: str, rows: list, source: str) -> dict[str, Any]:
    """Restore the state directory (taking the daemon's lock), observe every row, checkpoint."""
    from tvbod.service.events import EventSink, configure_logging
    from tvbod.service.server import Server

    configure_logging("console", stream=sys.stderr, level="warning")
    server = Server(config, EventSink())
    try:
        server.open()
        runtime = server.plants[plant]
        if runtime.proposal is not None:
            raise ImportError_(f"plant {plant!r} has proposal {runtime.proposal['id']!r} pending; "
                               "let the daemon finish it first; nothing was imported")
        first, resets, tag = runtime.strategy.t, [], uuid.uuid4().hex[:8]
        for i, (gains, y) in enumerate(rows):
            x = runtime.check_observation(gains)
            applied = runtime.record_observation(x, y, {"imported_from": source},
                                                 f"import-{tag}-{i}", "import")
            if applied.result.reset:
                resets.append(applied.result.t)
            if runtime.checkpoint_due:
                runtime.store.journal.sync()
                runtime.checkpoint("periodic")
        runtime.store.journal.sync()
        return {"first": first, "last": runtime.strategy.t - 1, "resets": resets,
                "dataset_size": runtime.strategy.dataset_size,
                "directory": runtime.store.directory}
    finally:
        server.shutdown()


def run(args: argparse.Namespace) -> int:
    from tvbod.service.config import ConfigError, load_daemon_config
    from tvbod.service.plant import RestoreError
    from tvbod.service.server import DaemonLockedError

    try:
        config = load_daemon_config(args.config)
        try:
            plant = config.plant(args.plant)
        except KeyError:
            raise ImportError_(f"no plant named {args.plant!r} in {config.path}; it has "
                               f"{', '.join(p.name for p in config.plants)}") from None
        rows = read_rows(args.file, plant)
        done = apply_rows(config, args.plant, rows, args.file.name)
    except (ImportError_, ConfigError, DaemonLockedError, RestoreError) as exc:
        print(f"tvbod import: {exc}", file=sys.stderr)
        return 2
    print(f"tvbod import: {len(rows)} observations into {done['directory']} as steps "
          f"t={done['first']}..{done['last']}; |D| = {done['dataset_size']}, resets at "
          f"{done['resets'] or 'no step'}")
    return 0
