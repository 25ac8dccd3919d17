"""Structured events: one structlog pipeline to stdout, and a JSON-lines file per plant.

Every event is a name plus fields (`log.info("reset", t=t, psi=psi)`), never a formatted string.
Events about a plant go to stdout *and* to that plant's `events.jsonl`, so a plant's history can
be read back (`event_files.read_events`) after the daemon's stdout is gone. Such an event is rendered once:
with the json format the stdout line is the file's line (`_JsonStdout`), not a second rendering.

Non-finite floats: JSON has no NaN or infinity, so they are written as the strings `"NaN"`,
`"Infinity"` and `"-Infinity"` (the spellings of the protobuf JSON mapping; `float()` parses them
back). Every line is strict RFC 8259 JSON; serialization uses `allow_nan=False` as a guard.

Event names the daemon uses: `EVENT_NAMES`. Their level is `info` unless `EVENT_LEVELS` says
otherwise; `emit(..., level=...)` overrides. The per-step events (`proposal`, `measurement`) are
`debug`: stdout (the journal) shows them only with `log_level: debug`, while `events.jsonl` keeps
every event whatever the level.

Under systemd (stdout is the stream named by `$JOURNAL_STREAM`) every stdout line starts with its
syslog priority, `<7>` debug, `<6>` info, `<4>` warning, `<3>` error, `<2>` critical, which
journald strips and stores as the entry's priority, so `journalctl -p warning` filters.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, TextIO

import structlog

from tvbod.service import fsio
from tvbod.service.durable import StorageError, _write_all
from tvbod.service.event_files import rotate

EVENT_NAMES = frozenset({
    "daemon_started", "plant_restored", "proposal", "measurement", "reset", "proposal_abandoned",
    "checkpoint_written", "client_error", "daemon_stopped", "storage_error", "config_reloaded",
    "config_reload_failed", "plant_removed", "adapter_claimed", "client_refused",
    "measurement_out_of_range", "slow_proposal", "internal_error", "sd_notify_failed",
    "reset_burst", "events_rotated", "python_warning",
})
EVENT_LEVELS: dict[str, str] = {
    "proposal": "debug", "measurement": "debug", "python_warning": "warning",
    "storage_error": "error", "client_error": "warning", "proposal_abandoned": "warning",
    "client_refused": "warning", "config_reload_failed": "error", "internal_error": "error",
    "reset_burst": "warning",
}
#: The events `tvbod replay` and `tvbod export` read: a line of one of these the disk refused is
#: always kept for a later write; of other events, at most `MAX_KEPT_LINES` lines are kept
#: (a long outage with clients retrying must not grow the daemon without bound; stdout has them).
HISTORY_EVENTS = frozenset({"measurement", "reset", "plant_restored", "config_reloaded"})
MAX_KEPT_LINES = 1000
_LEVELS = ("debug", "info", "warning", "error", "critical")
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
#: syslog priorities (sd-daemon(3) prefixes) of the levels.
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}


def finite_json(value: Any) -> Any:
    """`value` with every NaN/inf float (nested in dicts, lists, tuples) replaced by a string."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else _NON_FINITE[value]
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _finite_processor(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return finite_json(event_dict)  # type: ignore[no-any-return]


def _dumps(record: dict[str, Any]) -> str:
    """One JSON line. The common record has no NaN/inf and is rendered as is; only one that has
    (json refuses it with `allow_nan=False`) is copied through `finite_json` first."""
    try:
        return json.dumps(record, allow_nan=False, default=repr)
    except ValueError:
        return json.dumps(finite_json(record), allow_nan=False, default=repr)


class _JsonStdout:
    """Where `configure_logging("json")` sends lines, so a plant event rendered once for its file
    is written to stdout as the same line (with the `<N>` prefix under journald)."""

    def __init__(self, stream: TextIO, level: str, priority_prefix: bool, processors: list) -> None:
        self.stream, self.prefix = stream, priority_prefix
        self.lowest = _LEVELS.index(level)
        self.processors = processors  # structlog's, as `configure_logging` installed them
        self._lock = threading.Lock()

    @property
    def current(self) -> bool:
        """Still structlog's configuration (not replaced or reset since)."""
        return structlog.get_config()["processors"] is self.processors

    def write(self, level: str, line: str) -> None:
        if _LEVELS.index(level) < self.lowest:
            return
        text = (f"<{PRIORITIES[level]}>" if self.prefix else "") + line + "\n"
        with self._lock:
            self.stream.write(text)
            self.stream.flush()


#: Set by `configure_logging` for the json format; None for console (structlog renders those).
_json_stdout: _JsonStdout | None = None


def utc_timestamp() -> str:
    """Now as ISO 8601 UTC with a `Z`, the same format structlog's `TimeStamper` writes."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def is_journal_stream(stream: TextIO, env: dict[str, str] | None = None) -> bool:
    """True when `stream` is the journald stream systemd connected (`$JOURNAL_STREAM` names its
    device and inode, see systemd.exec(5)); False for a terminal, a pipe or a redirect."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError, AttributeError):
        return False


class SyslogPrefixRenderer:
    """Wraps a renderer: each line starts with `<N>`, the syslog priority of its level."""

    def __init__(self, renderer: Callable[..., str]) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method: str, event_dict: dict[str, Any]) -> str:
        level = event_dict.get("level", method)
        return f"<{PRIORITIES.get(level, 6)}>" + self.renderer(logger, method, event_dict)


def configure_logging(
    fmt: Literal["json", "console"] = "json", stream: TextIO | None = None, level: str = "info",
    priority_prefix: bool | None = None,
) -> None:
    """Configure structlog for the whole process (safe to call again: the last call wins).

    Each line carries `timestamp` (ISO, UTC), `level`, `event` and the bound context; `json`
    writes one JSON object per line, `console` a human-readable line. `stream` defaults to the
    `sys.stdout` of the moment of the call. Events below `level` are not written. With
    `priority_prefix` (default: when `stream` is the journald stream) lines start with `<N>`.
    """
    stream = stream if stream is not None else sys.stdout
    if priority_prefix is None:
        priority_prefix = is_journal_stream(stream)
    if fmt not in ("json", "console"):
        raise ValueError(f"log format {fmt!r} must be 'json' or 'console'")
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} must be one of {', '.join(_LEVELS)}")
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _finite_processor,
    ]
    if fmt == "json":
        processors.append(structlog.processors.format_exc_info)
        renderer: Any = structlog.processors.JSONRenderer(allow_nan=False, default=repr)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    processors.append(SyslogPrefixRenderer(renderer) if priority_prefix else renderer)
    global _json_stdout
    _json_stdout = _JsonStdout(stream, level, priority_prefix, processors) if fmt == "json" else None
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


class _LineFile:
    """An append-only file written one whole line at a time, opened on first use.

    A line the disk refuses (ENOSPC, EIO) is kept, in order, and written before any later line
    (`write_line` raises for the refused write, the next call tries the kept lines first); a
    partly written line is cut off again, or closed off with a newline when even the truncate
    fails. `sync` writes every kept line and fsyncs, and raises while a line is still unwritten.
    After a failed fsync the kernel may have dropped the unsynced pages and a later fsync can
    succeed without them (the PostgreSQL fsync lesson), so the next `sync` writes the bytes
    since the last good fsync again, in place, before it fsyncs.

    Every write goes through `tvbod.service.fsio` (the crash-state tests record them).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._size = 0  # bytes in the file (this process is its only writer)
        self._synced: int | None = None  # size at the last good fsync; None: none this run
        self._suspect = False  # an fsync failed since then
        self._kept: deque[bytes] = deque()  # lines the disk refused, oldest first

    @property
    def unwritten(self) -> int:
        """How many lines are kept because the disk refused them."""
        return len(self._kept)

    def write_line(self, line: str) -> None:
        """Write `line` after every kept line; raises `OSError` if the disk refused (the line
        is then kept and written first by the next call)."""
        self._kept.append((line + "\n").encode("utf-8"))
        self._write_kept()

    def _write_kept(self) -> None:
        while self._kept:
            fd = self._open()
            data = self._kept[0]
            try:
                _write_all(fd, data, self._size, fsio.pwrite)
            except OSError:
                self._cut()
                raise
            self._size += len(data)
            self._kept.popleft()

    def _open(self) -> int:
        if self._fd is None:
            fsio.makedirs(self.path.parent)
            # read and write: `_rewrite_unsynced` reads the unsynced bytes back
            self._fd = fsio.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
            if self._synced is None or self._synced > self._size:
                self._synced = self._size  # first use, or a new file after a rotation
            if self._size > 0 and not _ends_with_newline(self.path):
                try:  # a crash (or a refused write) tore the last line: keep ours apart
                    _write_all(self._fd, b"\n", self._size, fsio.pwrite)
                except OSError:
                    self.close()
                    raise
                self._size += 1
        return self._fd

    def _cut(self) -> None:
        """Remove what a refused write left of its line; if the disk refuses that too, close
        the file, so that reopening closes the torn line off with a newline."""
        try:
            fsio.ftruncate(self._fd, self._size)
        except OSError:
            self.close()

    def sync(self) -> None:
        """Write the kept lines and fsync the file and its name, so every line written so far
        survives a power cut; raises `OSError` while that is not so."""
        self._write_kept()
        if self._fd is None and not self._suspect:
            return  # nothing written by this process
        self._open()
        if self._suspect:
            self._rewrite_unsynced()
        try:
            fsio.fsync(self._fd)
            fsio.fsync_dir(self.path.parent)  # and the file's name: it may be new
        except OSError:
            self._suspect = True
            raise
        self._synced, self._suspect = self._size, False

    def _rewrite_unsynced(self) -> None:
        start = self._synced or 0
        data = os.pread(self._fd, self._size - start, start)
        _write_all(self._fd, data, start, fsio.pwrite)

    def close(self) -> None:
        if self._fd is not None:
            fsio.close(self._fd)
            self._fd = None


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


#: The daemon's logger; plant events logged through it are rendered once (`PlantEventLog.emit`).
_LOGGER = structlog.get_logger("tvbod")


class PlantEventLog:
    """Events of one plant: each `emit` goes to stdout and to `path` (JSON lines): with the
    daemon's logger and the json format, as one line rendered once; otherwise through `logger`.

    `plant` and any `context` (e.g. `t`) are bound onto every event; `bind` adds more context
    and shares the same file. A failing file write (disk full, I/O error) is reported on stdout
    as `storage_error` and does not raise: the line is kept and written, in order, before any
    later one (`_LineFile`). Until every kept line is written and fsync'd, `sync` raises
    `StorageError`, so no checkpoint absorbs the journal records that could still re-emit them.
    """

    def __init__(
        self, path: Path, plant: str, logger: Any = None, *, _file: _LineFile | None = None,
        observer: Callable[[str, dict], None] | None = None, **context: Any,
    ) -> None:
        self.path = Path(path)
        self.plant = plant
        self.context = {"plant": plant, **context}
        self.logger = logger if logger is not None else _LOGGER
        self._file = _file if _file is not None else _LineFile(self.path)
        self.observer = observer  # sees every event (tvbod/service/metrics.py counts some)

    def bind(self, **context: Any) -> PlantEventLog:
        """A view of this log with more bound context (same file, same logger)."""
        merged = {**self.context, **context}
        merged.pop("plant")
        return PlantEventLog(self.path, self.plant, self.logger, _file=self._file,
                             observer=self.observer, **merged)

    def emit(self, event: str, /, *, level: str | None = None, **fields: Any) -> None:
        """Log `event` with the bound context and `fields` to stdout and the plant's file."""
        level = level or EVENT_LEVELS.get(event, "info")
        if level not in _LEVELS:
            raise ValueError(f"log level {level!r} must be one of {', '.join(_LEVELS)}")
        data = {**self.context, **fields}
        line = _dumps({"timestamp": utc_timestamp(), "level": level, "event": event, **data})
        out = _json_stdout
        if out is not None and self.logger is _LOGGER and out.current:
            out.write(level, line)
        else:
            getattr(self.logger, level)(event, **data)
        if self.observer is not None:
            self.observer(event, data)
        if self._file.unwritten >= MAX_KEPT_LINES and event not in HISTORY_EVENTS:
            return  # on stdout only: the disk has refused every line for a long while
        try:
            self._file.write_line(line)
        except OSError as exc:
            self._report(exc, "event log")

    def _report(self, exc: OSError, what: str) -> None:
        self.logger.error("storage_error", plant=self.plant, path=str(self.path),
                          errno=exc.errno, error=str(exc), what=what,
                          unwritten_lines=self._file.unwritten)

    def sync(self) -> None:
        """Make the plant's event lines durable (called before each checkpoint); raises
        `StorageError` while a kept line is unwritten or the fsync fails."""
        try:
            self._file.sync()
        except OSError as exc:
            self._report(exc, "event log sync")
            raise StorageError("syncing", self.path, exc) from exc

    def rotate(self, checkpoint: Path, keep: int) -> list[str]:
        """Close the active file as a numbered segment (tvbod/service/event_files.py)."""
        self._file.close()
        return rotate(self.path.parent, checkpoint, keep)

    def close(self) -> None:
        self._file.close()


class EventSink:
    """The daemon's event outlet: daemon-wide events to stdout, plant events via `plant()`."""

    def __init__(self, logger: Any = None,
                 observer: Callable[[str, dict], None] | None = None) -> None:
        self.logger = logger if logger is not None else _LOGGER
        self.observer = observer
        self._plants: dict[str, PlantEventLog] = {}

    def emit(self, event: str, /, *, level: str | None = None, **fields: Any) -> None:
        """Log a daemon-wide event (`daemon_started`, `config_reloaded`, ...) to stdout only."""
        getattr(self.logger, level or EVENT_LEVELS.get(event, "info"))(event, **fields)

    def plant(self, plant: str, path: Path) -> PlantEventLog:
        """The event log of `plant` writing to `path`, created once and reused."""
        if plant not in self._plants:
            self._plants[plant] = PlantEventLog(path, plant, self.logger, observer=self.observer)
        return self._plants[plant]

    def close(self) -> None:
        for log in self._plants.values():
            log.close()
        self._plants.clear()
