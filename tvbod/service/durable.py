"""The byte level of a plant's files (tvbod/service/store.py): magic numbers and headers, the
errors, and durable writes (every call that changes the disk goes through `tvbod.service.fsio`;
tests inject disk faults with `writer`, a callable with the signature of `os.pwrite`)."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any, Callable

import msgpack

from tvbod.errors import TvbodError
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
