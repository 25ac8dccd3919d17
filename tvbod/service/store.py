"""Crash-safe persistence of one plant's optimizer state: checkpoints plus a write-ahead journal.

Layout of `<state_dir>/plants/<plant>/`::

    checkpoint        newest checkpoint: header + msgpack `{schema, journal_seq, state}`
    checkpoint.prev   the generation before it, the fallback when `checkpoint` is unreadable
    journal           records appended since the last reset, each with a journal-assigned `seq`
    journal.prev      the journal before the last reset: the records `checkpoint.prev` still needs
    events.jsonl      the plant's event lines (written by `tvbod.service.events`)

Invariant: a checkpoint with `journal_seq = n` plus every record with `seq > n` from `journal.prev`
and `journal` is the full state. Compaction (`PlantStore.compact`) writes the checkpoint first and
resets the journal second; a crash between the two leaves records with `seq <= n` in the journal,
which replay skips, so no record is applied twice. `seq` never goes back: a reset file starts
where the old one ended. Every byte that fails its checks is renamed or copied aside, never
deleted. OS errors on writes become `StorageError` with the file left as before the write.

Tests inject disk faults with `writer`: a callable with the signature of `os.pwrite`. Every call
that changes the disk goes through `tvbod.service.fsio` (the crash-state tests record them there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import msgpack

from tvbod.errors import TvbodError
from tvbod.protocol import PLANT_NAME_PATTERN, is_valid_plant_name
from tvbod.service import fsio

Writer = Callable[[int, bytes, int], int]
"""Writes bytes at an offset of an open fd and returns how many it wrote, like `os.pwrite`."""

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 16 * 1024 * 1024
_CK_MAGIC, _JN_MAGIC = b"TVBODCKP", b"TVBODJNL"
_CK_HEADER = struct.Struct(">8sIQ32s")  # magic, schema, payload length, sha256(payload)
_JN_HEADER = struct.Struct(">8sIQ")  # magic, schema, base_seq (the seq before the first record)
_REC_HEADER = struct.Struct(">II")  # payload length, crc32(payload)


class StorageError(TvbodError):
    """The disk refused a write (`errno` ENOSPC, EROFS, EACCES, EIO...); the file is unchanged.

    A child of `tvbod.errors.TvbodError`, which imports nothing (so this module still needs only
    the standard library and msgpack).
    """

    def __init__(self, operation: str, path: Path, error: OSError) -> None:
        self.operation = operation
        self.path = path
        self.errno = error.errno
        reason = os.strerror(error.errno) if error.errno else str(error)
        super().__init__(f"{operation} {path} failed: {reason}; free space or fix permissions")


def _write_all(fd: int, data: bytes, offset: int, writer: Writer) -> None:
    while data:
        written = writer(fd, data, offset)
        data, offset = data[written:], offset + written


def _fsync_dir(directory: Path) -> None:
    fsio.fsync_dir(directory)


def _aside_name(path: Path, tag: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate, n = path.with_name(f"{path.name}.{tag}-{stamp}"), 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{tag}-{stamp}-{n}")
    return candidate


def _move_aside(path: Path) -> str:
    """Rename an unusable file to `<name>.corrupt-<UTC time>` and say where it went."""
    aside = _aside_name(path, "corrupt")
    try:
        fsio.replace(path, aside)
    except OSError as exc:
        raise StorageError("moving aside", path, exc) from exc
    return f"moved to {aside.name}"


def _pack(value: Any, what: str) -> bytes:
    try:  # strict_types: tuples, numpy scalars and subclasses would not round-trip unchanged
        return msgpack.packb(value, use_bin_type=True, strict_types=True)
    except TypeError as exc:
        raise TypeError(f"{what} must be plain dict/list/int/float/str/bool/None: {exc}") from None


def _write_durable(path: Path, blob: bytes, writer: Writer) -> None:
    """Create `path` holding `blob` and fsync it; on failure remove it and raise `StorageError`."""
    try:
        fd = fsio.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, blob, 0, writer)
            fsio.fsync(fd)
        finally:
            fsio.close(fd)
    except OSError as exc:
        fsio.unlink(path, missing_ok=True)
        raise StorageError("writing", path, exc) from exc


class UnsupportedSchema(TvbodError):
    """A well-formed file written by another version of tvbod (schema != SCHEMA_VERSION).

    Never treated as corruption: nothing is moved aside, and the caller refuses to start the plant
    rather than silently starting it afresh.
    """


class _Unusable(TvbodError):
    """A checkpoint or journal header failed its checks; the message says which."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What `CheckpointStore.load` found; `source="none"` without problems means a fresh plant."""

    state: dict[str, Any] | None
    journal_seq: int
    source: Literal["current", "previous", "none"]
    problems: list[str] = field(default_factory=list)


class CheckpointStore:
    """Two generations of checkpoints in `directory`: `checkpoint` and `checkpoint.prev`."""

    def __init__(self, directory: Path, writer: Writer = fsio.pwrite) -> None:
        self.directory = Path(directory)
        self.current = self.directory / "checkpoint"
        self.previous = self.directory / "checkpoint.prev"
        self.writer = writer

    def write(self, state: dict[str, Any], journal_seq: int) -> Path:
        """Persist `state` as covering journal records up to `journal_seq`; returns the path.

        The old `checkpoint` becomes `checkpoint.prev` only after the new one is on disk, so a
        crash at any point leaves at least one good generation. Raises `StorageError` on OS errors
        (the existing generations are untouched) and `TypeError` for non-plain data.
        """
        if not isinstance(state, dict) or type(journal_seq) is not int or journal_seq < 0:
            raise TypeError("state must be a dict and journal_seq an int >= 0")
        body = {"schema": SCHEMA_VERSION, "journal_seq": journal_seq, "state": state}
        payload = _pack(body, "checkpoint state")
        digest = hashlib.sha256(payload).digest()
        blob = _CK_HEADER.pack(_CK_MAGIC, SCHEMA_VERSION, len(payload), digest) + payload
        fsio.makedirs(self.directory)
        tmp = self.directory / "checkpoint.new"
        _write_durable(tmp, blob, self.writer)
        try:
            if self.current.exists():
                fsio.replace(self.current, self.previous)
            fsio.replace(tmp, self.current)
            _fsync_dir(self.directory)
        except OSError as exc:
            fsio.unlink(tmp, missing_ok=True)
            raise StorageError("installing", self.current, exc) from exc
        return self.current

    def load(self) -> LoadedCheckpoint:
        """The newest readable generation; unreadable files are renamed aside and reported."""
        leftovers = sorted(self.directory.glob("checkpoint.new*"))
        problems = [f"removed unfinished {p.name} (a write cut short by a crash)" for p in leftovers]
        for path in leftovers:
            fsio.unlink(path)
        if not self.current.exists() and self.previous.exists():
            problems.append("checkpoint missing (crash during rotation?); trying checkpoint.prev")
        for source, path in (("current", self.current), ("previous", self.previous)):
            if not path.exists():
                continue
            try:
                state, seq = self._read(path)
            except _Unusable as exc:
                problems.append(f"{path.name} unusable ({exc}); {_move_aside(path)}")
                continue
            return LoadedCheckpoint(state, seq, source, problems)  # type: ignore[arg-type]
        return LoadedCheckpoint(None, 0, "none", problems)

    @staticmethod
    def _read(path: Path) -> tuple[dict[str, Any], int]:
        data = path.read_bytes()
        if len(data) < _CK_HEADER.size:
            raise _Unusable(f"truncated: {len(data)} bytes, shorter than the header")
        magic, schema, length, digest = _CK_HEADER.unpack_from(data)
        payload = data[_CK_HEADER.size :]
        if magic != _CK_MAGIC:
            raise _Unusable("bad magic bytes")
        if schema != SCHEMA_VERSION:
            raise UnsupportedSchema(f"{path} has file schema {schema}; this tvbod reads schema "
                                    f"{SCHEMA_VERSION}")
        if len(payload) != length:
            raise _Unusable(f"truncated: payload is {len(payload)} bytes, header says {length}")
        if hashlib.sha256(payload).digest() != digest:
            raise _Unusable("checksum mismatch")
        try:
            body = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            return body["state"], int(body["journal_seq"])
        except Exception as exc:  # checksum matched, so this is a writer bug, not bit rot
            raise _Unusable(f"undecodable payload: {exc}") from None


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


@dataclass(frozen=True)
class Recovery:
    """Checkpointed state and the journal records to replay on top of it, in seq order."""

    state: dict[str, Any] | None
    records_after_checkpoint: list[dict[str, Any]]
    problems: list[str]
    journal_seq: int = 0
    source: Literal["current", "previous", "none"] = "none"
    #: `(first, last)` seq ranges missing from the records (lost records: the plant refuses them)
    missing: tuple[tuple[int, int], ...] = ()


class PlantStore:
    """The files of one plant under `state_dir/plants/<plant>/`."""

    def __init__(self, state_dir: Path, plant: str, writer: Writer = fsio.pwrite) -> None:
        if not is_valid_plant_name(plant):
            raise ValueError(f"plant name {plant!r} must match {PLANT_NAME_PATTERN}")
        self.plant = plant
        self.state_dir = Path(state_dir)
        self.directory = Path(state_dir) / "plants" / plant
        self.checkpoints = CheckpointStore(self.directory, writer)
        self.journal = Journal(self.directory / "journal", writer)

    @property
    def events_path(self) -> Path:
        return self.directory / "events.jsonl"

    def recover(self) -> Recovery:
        """Load the newest good checkpoint and collect every later record from both journals.

        Gaps in the seq sequence are reported (they mean lost records); a journal that ends before
        the checkpoint (e.g. recreated after corruption) is reset to continue after it.
        """
        fsio.makedirs(self.directory, durable_up_to=self.state_dir)  # no power cut undoes them
        loaded = self.checkpoints.load()
        after = loaded.journal_seq
        problems = list(loaded.problems)
        current = self.journal.read(after_seq=after)
        problems += current.problems
        older, older_problems = self.journal.older_records(after)
        problems += older_problems
        records = older + current.records
        missing = []
        expected = after + 1
        for record in records:  # the one gap check
            if record["seq"] != expected:
                missing.append((expected, record["seq"] - 1))
                problems.append(f"journal records {expected}..{record['seq'] - 1} are missing")
            expected = record["seq"] + 1
        if self.journal.last_seq < after:
            problems.append(f"journal ends at seq {self.journal.last_seq}, before the checkpoint's "
                            f"{after}; reset to continue at {after + 1}")
            self.journal.reset(after + 1)
        return Recovery(loaded.state, records, problems, after, loaded.source, tuple(missing))

    def write_optimizer(self, fingerprint: str, mapping: dict[str, Any]) -> Path:
        """Keep `mapping` as `optimizers/<fingerprint>.json` (once; durable, as replay needs it
        after a power cut too); `read_optimizer` reads it back."""
        path = optimizer_path(self.directory, fingerprint)
        if not path.exists():
            fsio.makedirs(path.parent)
            tmp = path.with_suffix(".tmp")
            fd = fsio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                fsio.append(fd, json.dumps(mapping).encode("utf-8"))
                fsio.fsync(fd)
            finally:
                fsio.close(fd)
            fsio.replace(tmp, path)
            fsio.fsync_dir(path.parent)
        return path

    def compact(self, state: dict[str, Any]) -> Path:
        """Checkpoint `state` (which must include every journaled record) and empty the journal."""
        path = self.checkpoints.write(state, self.journal.last_seq)
        self.journal.reset()
        return path

    def close(self) -> None:
        self.journal.close()


def optimizer_path(plant_dir: Path, fingerprint: str) -> Path:
    return Path(plant_dir) / "optimizers" / f"{fingerprint}.json"


def read_optimizer(plant_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The optimizer mapping a plant recorded under `fingerprint` (`PlantStore.write_optimizer`),
    or None when there is no such file."""
    path = optimizer_path(plant_dir, fingerprint)
    return json.loads(path.read_text()) if path.exists() else None
