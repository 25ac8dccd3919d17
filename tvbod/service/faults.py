"""Fault injection for tests of the running daemon (disk full, internal errors), off by default.

When `$TVBOD_FAULT_FILE` names a file, the daemon reads it before each storage write and each
request: `enospc` makes writes fail as if the disk were full, `eio` as an I/O error, `internal`
makes request handling raise, `hold-prepare:NAME` holds plant NAME's model jobs
(tvbod/service/workers.py) at their start, as an endless refit would. Removing the file (or emptying it) ends the fault. Without
the variable nothing is checked, so production pays nothing.
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
        if fault == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fault == "eio":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return fsio.pwrite(fd, data, offset)

    return write


def from_environment() -> tuple[object, object, object]:
    """`(writer, check_request, hold_job)` for the store, the server and its model workers;
    plain ones (and None checks) without the variable."""
    name = os.environ.get(ENV)
    if not name:
        return fsio.pwrite, None, None
    path = Path(name)

    def check_request() -> None:
        if _current(path) == "internal":
            raise InjectedFault("fault injected by $TVBOD_FAULT_FILE")

    def hold_job(plant: str) -> None:
        while _current(path) == f"hold-prepare:{plant}":
            time.sleep(0.01)

    return faulty_writer(path), check_request, hold_job
