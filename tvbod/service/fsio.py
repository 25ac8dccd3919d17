"""The one seam between tvbod's persistence and the file system.

Every call that changes what a power cut can leave on disk - creating, writing, appending,
truncating, fsyncing, renaming and unlinking files, creating directories and fsyncing them -
goes through the module functions below (`tvbod.service.store`, the plant event files, the
optimizer files). Reads do not: they cannot change what survives.

The functions delegate to one `Files` object, by default the plain `os` calls. A test swaps in
another (`with use(recorder): ...`, e.g. one that records the operation trace from which the
power-cut enumerator in tests/service/test_crash_states.py builds every disk image a crash may
leave) without touching the logic that calls them. Fault injection (`tvbod.service.faults`)
wraps `pwrite` the same way, and installs a `Files` that fails the event files' writes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


class Files:
    """The file-system calls the persistence code makes, as plain `os` calls."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def append(self, fd: int, data: bytes) -> int:
        """Write at the end of a file opened with `O_APPEND`; returns the bytes written."""
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        os.link(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def mkdir(self, path: Path, mode: int = 0o755) -> None:
        os.mkdir(path, mode)

    def fsync_dir(self, directory: Path) -> None:
        """fsync a directory, making the names created, renamed or removed in it durable."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_files: Files = Files()


@contextlib.contextmanager
def use(files: Files) -> Iterator[Files]:
    """Route every call through `files` inside the block (tests: a recorder, a broken order)."""
    global _files
    previous, _files = _files, files
    try:
        yield files
    finally:
        _files = previous


def current() -> Files:
    """The `Files` every call goes through now."""
    return _files


def install(files: Files) -> None:
    """Route every call through `files` from now on (a running daemon's fault injection)."""
    global _files
    _files = files


def open(path: Path, flags: int, mode: int = 0o644) -> int:  # noqa: A001 - mirrors os.open
    return _files.open(Path(path), flags, mode)


def pwrite(fd: int, data: bytes, offset: int) -> int:
    return _files.pwrite(fd, data, offset)


def append(fd: int, data: bytes) -> None:
    """Append all of `data` to a file opened with `O_APPEND`."""
    view = memoryview(data)
    while view:
        view = view[_files.append(fd, bytes(view)):]


def fsync(fd: int) -> None:
    _files.fsync(fd)


def ftruncate(fd: int, size: int) -> None:
    _files.ftruncate(fd, size)


def close(fd: int) -> None:
    _files.close(fd)


def replace(src: Path, dst: Path) -> None:
    _files.replace(Path(src), Path(dst))


def link(src: Path, dst: Path) -> None:
    """A hard link `dst` to `src` (a second name; durable once `dst`'s directory is fsync'd)."""
    _files.link(Path(src), Path(dst))


def unlink(path: Path, missing_ok: bool = False) -> None:
    try:
        _files.unlink(Path(path))
    except FileNotFoundError:
        if not missing_ok:
            raise


def fsync_dir(directory: Path) -> None:
    _files.fsync_dir(Path(directory))


def makedirs(directory: Path, durable_up_to: Path | None = None) -> None:
    """Create `directory` and any missing parents; each new name is made durable (its parent
    directory is fsync'd), so a power cut cannot take the directory away with files in it.

    With `durable_up_to` (an ancestor), the names of every directory from `directory` up to
    and including it are made durable too, whoever created them (a plain `mkdir` elsewhere).
    """
    directory = Path(directory)
    missing = []
    node = directory
    while not node.exists():
        missing.append(node)
        node = node.parent
    for path in reversed(missing):
        try:
            _files.mkdir(path)
        except FileExistsError:
            continue
        _files.fsync_dir(path.parent)
    if durable_up_to is not None:
        top, node = Path(durable_up_to).resolve(), directory.resolve()
        while node != node.parent:
            _files.fsync_dir(node.parent)
            if node == top:
                break
            node = node.parent
