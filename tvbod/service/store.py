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

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgpack

from tvbod.protocol import PLANT_NAME_PATTERN, is_valid_plant_name
from tvbod.service import fsio
from tvbod.service.durable import (
    _CK_HEADER, _CK_MAGIC, SCHEMA_VERSION, StorageError, UnsupportedSchema, Writer, _fsync_dir,
    _move_aside, _pack, _Unusable, _write_durable,
)
from tvbod.service.journal import Journal


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
