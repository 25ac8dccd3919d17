"""Fault injection for tests of the running daemon (disk full, internal errors), off by default.

When `$TVBOD_FAULT_FILE` names a file, the daemon reads it before each storage write and each
request: `enospc` makes writes fail as if the disk were full, `eio` as an I/O error (the
journal's and the checkpoints'), `enospc:events` and `eio:events` fail the writes and fsyncs of
the plants' event files only (`EventFileFaults`), `internal` makes request handling raise,
`hold-prepare:NAME` holds plant NAME's model jobs (tvbod/service/workers.py) at their start, as
an endless refit would. Removing the file (or emptying it) ends the fault. Without the variable
nothing is checked, so production pays nothing.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from tvbod.errors import TvbodError
from tvbod.service import fsio

ENV = "TVBOD_FAULT_FILE"


class InjectedFault(TvbodError, RuntimeError):
    """Raised by request handling when the fault file says `internal`."""


def _current(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def faulty_writer(path: Path):
    """An `os.pwrite` replacement that fails while the fault file says `enospc` or `eio`."""

    def write(fd: int, data: bytes, offset: int) -> int:
        fault = _current(path)
        if fault in ("enospc", "eio"):
            raise _error(fault)
        return fsio.pwrite(fd, data, offset)

    return write


def _error(fault: str) -> OSError:
    code = errno.ENOSPC if fault.startswith("enospc") else errno.EIO
    return OSError(code, os.strerror(code))


class EventFileFaults:
    """The file-system seam's calls, passed on to `inner`, except that writes and fsyncs of a
    plant's event files (`events*.jsonl`) fail while the fault file says `enospc:events` or
    `eio:events`: the journal and the checkpoints keep working, as when one file's blocks fail."""

    def __init__(self, path: Path, inner: fsio.Files) -> None:
        self.fault_file, self.inner = path, inner
        self._events: set[int] = set()  # open fds of event files

    def _check(self, fd: int) -> None:
        fault = _current(self.fault_file)
        if fd in self._events and fault in ("enospc:events", "eio:events"):
            raise _error(fault)

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        fd = self.inner.open(path, flags, mode)
        if Path(path).name.startswith("events") and Path(path).suffix == ".jsonl":
            self._events.add(fd)
        return fd

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self._check(fd)
        return self.inner.pwrite(fd, data, offset)

    def append(self, fd: int, data: bytes) -> int:
        self._check(fd)
        return self.inner.append(fd, data)

    def fsync(self, fd: int) -> None:
        self._check(fd)
        self.inner.fsync(fd)

    def close(self, fd: int) -> None:
        self._events.discard(fd)
        self.inner.close(fd)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def from_environment() -> tuple[object, object, object]:
    """`(writer, check_request, hold_job)` for the store, the server and its model workers;
    plain ones (and None checks) without the variable. With it, the file-system seam also goes
    through `EventFileFaults` from then on."""
    name = os.environ.get(ENV)
    if not name:
        return fsio.pwrite, None, None
    path = Path(name)
    if not isinstance(fsio.current(), EventFileFaults):
        fsio.install(EventFileFaults(path, fsio.current()))

    def check_request() -> None:
        if _current(path) == "internal":
            raise InjectedFault("fault injected by $TVBOD_FAULT_FILE")

    def hold_job(plant: str) -> None:
        while _current(path) == f"hold-prepare:{plant}":
            time.sleep(0.01)

    return faulty_writer(path), check_request, hold_job
