"""The write-ahead journal of one plant: append-only, fsync'd records, each stamped with a
monotonically increasing `seq`, repaired on open (a torn tail cut off, a corrupt tail set aside).
Part of the plant's files described in tvbod/service/store.py."""

from __future__ import annotations

import contextlib
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from tvbod.service import fsio
from tvbod.service.durable import (
    _JN_HEADER, _JN_MAGIC, _REC_HEADER, MAX_RECORD_BYTES, SCHEMA_VERSION, StorageError,
    UnsupportedSchema, Writer, _aside_name, _fsync_dir, _move_aside, _pack, _Unusable,
    _write_all, _write_durable,
)


@dataclass(frozen=True)
class JournalRead:
    """Records with `seq > after_seq` in order, the last good seq, and what was repaired."""

    records: list[dict[str, Any]]
    last_seq: int
    problems: list[str] = field(default_factory=list)
    truncated_bytes: int = 0


@dataclass
class _Scan:
    base_seq: int
    records: list[dict[str, Any]]
    good_end: int
    problem: str | None = None
    torn: bool = True

    @property
    def last_seq(self) -> int:
        return self.records[-1]["seq"] if self.records else self.base_seq


def _scan(data: bytes) -> _Scan:
    """Parse a journal file; stop at the first record that fails a check and say why.

    A failure whose record reaches the end of the file is a torn write (`torn=True`); a failure
    followed by more bytes, or an impossible length, is corruption (`torn=False`).
    """
    if len(data) < _JN_HEADER.size:
        raise _Unusable(f"header truncated ({len(data)} bytes)")
    magic, schema, base = _JN_HEADER.unpack_from(data)
    if magic != _JN_MAGIC:
        raise _Unusable("bad magic bytes in the header")
    if schema != SCHEMA_VERSION:
        raise UnsupportedSchema(f"the journal has file schema {schema}; this tvbod reads schema "
                                f"{SCHEMA_VERSION}")
    scan = _Scan(base, [], _JN_HEADER.size)
    pos = scan.good_end
    while pos < len(data):
        if len(data) - pos < _REC_HEADER.size:
            scan.problem = "short record header"
            return scan
        length, crc = _REC_HEADER.unpack_from(data, pos)
        end = pos + _REC_HEADER.size + length
        if length > MAX_RECORD_BYTES:
            scan.problem, scan.torn = f"impossible record length {length}", False
            return scan
        if end > len(data):
            scan.problem = f"short payload ({len(data) - pos - _REC_HEADER.size} of {length} bytes)"
            return scan
        payload = data[pos + _REC_HEADER.size : end]
        if zlib.crc32(payload) != crc:
            scan.problem, scan.torn = "crc mismatch", end == len(data)
            return scan
        try:
            record = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            ok = isinstance(record, dict) and record.get("seq") == scan.last_seq + 1
        except Exception:
            ok = False
        if not ok:
            scan.problem, scan.torn = f"record is not the map with seq {scan.last_seq + 1}", False
            return scan
        scan.records.append(record)
        pos = scan.good_end = end
    return scan


class Journal:
    """Append-only, fsync'd log of dict records, each stamped with a monotonically increasing `seq`.

    `Journal.open(path)` (or the first call on a `Journal(path)`) resumes the seq counter, creates
    the file if missing and repairs a damaged tail; the next `read` reports the repair.
    """

    def __init__(self, path: Path, writer: Writer = fsio.pwrite) -> None:
        self.path = Path(path)
        self.prev_path = self.path.with_name(self.path.name + ".prev")
        self.writer = writer
        self._fd: int | None = None
        self._size = self._base_seq = self._last_seq = 0
        self._problems: list[str] = []  # repairs not yet reported by `read`
        self._cut = 0

    @classmethod
    def open(cls, path: Path, writer: Writer = fsio.pwrite) -> Journal:
        journal = cls(path, writer)
        journal._ensure_open()
        return journal

    @property
    def last_seq(self) -> int:
        """Seq of the last acknowledged record (or the reset point if there is none)."""
        self._ensure_open()
        return self._last_seq

    def append(self, record: dict[str, Any], sync: bool = True) -> int:
        """Write `record` with the next seq and fsync it; returns the seq once it is durable.

        With `sync=False` the fsync is left to a later `sync()` (group commit: the daemon fsyncs
        every journal touched by a batch of requests once, before sending any reply).
        Raises `StorageError` if the disk refuses; a partial write is cut off again (and would be
        overwritten by the next append anyway), so every acknowledged record stays readable.
        """
        if "seq" in record:
            raise ValueError("records may not carry their own 'seq'; the journal assigns it")
        fd = self._ensure_open()
        payload = _pack({"seq": self._last_seq + 1, **record}, "journal records")
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(f"record of {len(payload)} bytes exceeds {MAX_RECORD_BYTES}")
        blob = _REC_HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            _write_all(fd, blob, self._size, self.writer)
            if sync:
                fsio.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                fsio.ftruncate(fd, self._size)
            raise StorageError("appending to", self.path, exc) from exc
        self._size += len(blob)
        self._last_seq += 1
        self._unsynced = not sync
        return self._last_seq

    @property
    def unsynced(self) -> bool:
        """True when records were appended with `sync=False` and not fsync'd since."""
        return getattr(self, "_unsynced", False)

    def sync(self) -> None:
        """fsync the records appended with `sync=False` (raises `StorageError` on failure)."""
        if not self.unsynced or self._fd is None:
            return
        try:
            fsio.fsync(self._fd)
        except OSError as exc:
            raise StorageError("syncing", self.path, exc) from exc
        self._unsynced = False

    def read(self, after_seq: int = 0) -> JournalRead:
        """All intact records with `seq > after_seq`, after repairing the file (see `_repair`)."""
        self._ensure_open()
        scan = self._repair()
        problems, cut, self._problems, self._cut = self._problems, self._cut, [], 0
        records = [r for r in scan.records if r["seq"] > after_seq]
        return JournalRead(records, scan.last_seq, problems, cut)

    def older_records(self, after_seq: int) -> tuple[list[dict[str, Any]], list[str]]:
        """Records in `journal.prev` with `after_seq < seq <= base_seq`, and any problems."""
        self._ensure_open()
        if after_seq >= self._base_seq or not self.prev_path.exists():
            return [], []
        try:
            scan = _scan(self.prev_path.read_bytes())
        except _Unusable as exc:
            return [], [f"{self.prev_path.name} unusable ({exc})"]
        records = [r for r in scan.records if after_seq < r["seq"] <= self._base_seq]
        problem = [f"{self.prev_path.name}: {scan.problem} at byte {scan.good_end}"]
        return records, problem if scan.problem else []

    def reset(self, start_seq: int | None = None) -> None:
        """Start an empty journal whose first record gets `start_seq` (default `last_seq + 1`).

        The current file becomes `journal.prev`. Call it only after a checkpoint covering
        `last_seq` is written; seq never goes back, so `start_seq` must exceed `last_seq`.
        """
        self._ensure_open()
        start = self._last_seq + 1 if start_seq is None else start_seq
        if start <= self._last_seq:
            raise ValueError(f"start_seq {start} must exceed last_seq {self._last_seq}")
        tmp = self.path.with_name(self.path.name + ".new")
        _write_durable(tmp, _JN_HEADER.pack(_JN_MAGIC, SCHEMA_VERSION, start - 1), self.writer)
        try:
            fsio.replace(self.path, self.prev_path)
            fsio.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            if not self.path.exists() and self.prev_path.exists():
                fsio.replace(self.prev_path, self.path)  # go on appending to the old file
            raise StorageError("resetting", self.path, exc) from exc
        self.close()
        self._ensure_open()

    def close(self) -> None:
        if self._fd is not None:
            fsio.close(self._fd)
            self._fd = None

    def __enter__(self) -> Journal:
        self._ensure_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ensure_open(self) -> int:
        if self._fd is None:
            fsio.makedirs(self.path.parent)
            if not self.path.exists():  # new, or a crash came between reset's two renames
                self._create()
            self._fd = fsio.open(self.path, os.O_RDWR)
            self._repair()
            # After a process crash the unsynced tail may live in the page cache only; recovery
            # acknowledges what it reads (the reply cache answers retries), so make it durable.
            fsio.fsync(self._fd)
        return self._fd

    def _create(self) -> None:
        """An empty journal continuing after `journal.prev` (or from 0 if there is none)."""
        try:
            base = _scan(self.prev_path.read_bytes()).last_seq
        except (OSError, _Unusable):
            base = 0
        tmp = self.path.with_name(self.path.name + ".new")
        _write_durable(tmp, _JN_HEADER.pack(_JN_MAGIC, SCHEMA_VERSION, base), self.writer)
        try:
            fsio.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            raise StorageError("creating", self.path, exc) from exc

    def _repair(self) -> _Scan:
        """Scan the file; cut a torn tail; copy a corrupt tail aside, then cut it.

        A file with a bad header is renamed aside whole and replaced by an empty journal.
        """
        assert self._fd is not None
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        try:
            scan = _scan(data)
        except _Unusable as exc:
            self._problems.append(f"journal unusable ({exc}); {_move_aside(self.path)}")
            self.close()
            self._ensure_open()  # an empty journal continuing after journal.prev
            return self._repair()
        cut = len(data) - scan.good_end
        if scan.problem and scan.torn:
            self._problems.append(f"torn last record dropped ({scan.problem}; {cut} bytes)")
        elif scan.problem:
            aside = _aside_name(self.path, "corrupt-tail")
            _write_durable(aside, data[scan.good_end :], fsio.pwrite)
            self._problems.append(f"corrupt record at byte {scan.good_end} ({scan.problem}); "
                                  f"stopped there, {cut} bytes saved to {aside.name}")
        if cut:
            fsio.ftruncate(self._fd, scan.good_end)
            fsio.fsync(self._fd)
            self._cut += cut
        self._size, self._base_seq, self._last_seq = scan.good_end, scan.base_seq, scan.last_seq
        return scan
