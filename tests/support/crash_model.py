"""Power-cut states of a recorded file-system trace (the model of docs/reliability.md, Power cuts).

`Recorder` is a `tvbod.service.fsio.Files` that performs every call for real and appends it to
`trace`; `mark()` adds a point of the session (a reply sent). `images(trace, k, ...)` yields the
disk images a power cut right after the first `k` operations may leave:

- data a file's fsync covered persists; bytes written after its last fsync persist as any byte
  prefix (torn at any byte, possibly nothing); a truncate or overwrite after its last fsync either
  happened or not;
- a name (a created file or directory, a rename's new name, an unlink) persists once its
  directory was fsync'd; each one not yet covered may independently have happened or not (a
  rename is atomic: its new name points at the file and the old name is gone, or neither);
- a path whose directory's own name did not persist is absent with everything under it.

Broken write orders for the tests that prove the enumerator can fail: `skip(op, path)` makes the
recorder leave a call out entirely (neither performed nor recorded), as buggy code would; a
skipped write reports every byte written, as a disk that silently dropped it.

Storage faults (`Fault`): from the first call at its site (a file kind and `write` or `fsync`)
after the session's `after`-th acknowledged request, the recorder fails `calls` calls there with
its errno, then the disk works again ("space returns"). ENOSPC lets the first refused write
store half of its bytes (a short write, as a filling disk does), EIO stores nothing.
"""

from __future__ import annotations

import errno as errnos
import hashlib
import itertools
import os
import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from tvbod.service import fsio

DIR = "dir"
#: Name operations of one directory not yet covered by its fsync: all subsets up to this many.
ALL_SUBSETS_UP_TO = 6
#: Combinations of the directories' subsets per state, at most (the correct order has one
#: directory with pending names at a time; a broken one can pile them up everywhere).
MAX_NAME_COMBOS = 256
#: Without sampling, unsynced tails up to this long are torn at every byte (a journal batch);
#: longer ones (the event file since the last checkpoint) at every write boundary + 32 bytes.
EVERY_BYTE_UP_TO = 4096


class SimulatedCrash(BaseException):
    """Raised by the recorder at a chosen fsync: the process dies there (SIGKILL-like), its page
    cache survives; a BaseException so that no `except Exception` in the daemon swallows it."""


#: The fault sites: each file kind the persistence writes, by both of the calls that can fail.
SITES = tuple((kind, op) for kind in ("journal", "checkpoint", "events", "directory")
              for op in ("write", "fsync") if (kind, op) != ("directory", "write"))


def site_kind(path: str) -> str | None:
    """The kind of file (or the plant directory) at relative `path`, as `SITES` names them."""
    name = path.rsplit("/", 1)[-1]
    for kind in ("journal", "checkpoint", "events"):
        if name.startswith(kind):
            return kind
    return "directory" if path.count("/") == 2 and path.startswith("state/plants/") else None


@dataclass
class Fault:
    """ENOSPC or EIO at `site` from the first call there after `after` acknowledged requests."""

    site: tuple[str, str]
    after: int
    errno: int
    calls: int = 3
    failed: int = 0  # calls refused so far
    call_index: int | None = None  # which call at the site was refused first

    def refuses(self, site: tuple[str, str], acks: int, index: int) -> bool:
        if site != self.site or acks < self.after or self.failed >= self.calls:
            return False
        if self.call_index is None:
            self.call_index = index
        self.failed += 1
        return True

    def error(self) -> OSError:
        return OSError(self.errno, os.strerror(self.errno))


class Recorder(fsio.Files):
    """Real file-system calls under `root`, each one logged to `trace` as `(op, fields)`."""

    def __init__(self, root: Path, skip: Callable[[str, str], bool] | None = None) -> None:
        self.root = Path(root).resolve()
        self.trace: list[tuple[str, dict]] = []
        self.skip = skip or (lambda op, path: False)
        self.crash_at_fsync_of: str | None = None  # one-shot: die before fsyncing this path
        self.fault: Fault | None = None
        self.acks = 0  # ok replies marked so far
        self.site_calls: dict[tuple[str, str], int] = defaultdict(int)
        self.site_log: list[tuple[tuple[str, str], int]] = []  # (site, acks so far) per call
        self._paths: dict[int, str] = {}
        self._lock = threading.RLock()

    def rel(self, path: Path) -> str:
        return Path(os.path.abspath(path)).relative_to(self.root).as_posix()

    def _log(self, op: str, **fields) -> None:
        self.trace.append((op, fields))

    def mark(self, **fields) -> None:
        with self._lock:
            self.acks += bool(fields.get("ok"))
            self._log("mark", **fields)

    def _refused(self, path: str, op: str) -> bool:
        """Count a call at its site; True if the injected fault refuses it."""
        kind = site_kind(path)
        if kind is None:
            return False
        site = (kind, op)
        self.site_calls[site] += 1
        self.site_log.append((site, self.acks))
        return self.fault is not None and self.fault.refuses(site, self.acks, self.site_calls[site])

    def _write(self, fd: int, data: bytes, offset: int | None) -> int:
        """Perform one write (`offset` None: append) unless skipped or refused."""
        path = self._paths[fd]
        if self._refused(path, "write"):
            if self.fault.errno != errnos.ENOSPC or self.fault.failed > 1 or len(data) < 2:
                raise self.fault.error()
            data = data[: len(data) // 2]  # a short write: the disk took part of it
        if self.skip("write", path):
            return len(data)
        if offset is None:
            n = os.write(fd, data)
            offset = os.lseek(fd, 0, os.SEEK_CUR) - n
        else:
            n = os.pwrite(fd, data, offset)
        self._log("write", fd=fd, offset=offset, data=bytes(data[:n]))
        return n

    def open(self, path, flags, mode=0o644):
        with self._lock:
            rel = self.rel(path)
            fd = os.open(path, flags, mode)
            self._paths[fd] = rel
            self._log("open", path=rel, fd=fd, trunc=bool(flags & os.O_TRUNC))
            return fd

    def pwrite(self, fd, data, offset):
        with self._lock:
            return self._write(fd, data, offset)

    def append(self, fd, data):
        with self._lock:
            return self._write(fd, data, None)

    def fsync(self, fd):
        with self._lock:
            path = self._paths[fd]
            if path == self.crash_at_fsync_of:
                self.crash_at_fsync_of = None
                raise SimulatedCrash(path)
            if self._refused(path, "fsync"):
                raise self.fault.error()
            if self.skip("fsync", path):
                return
            os.fsync(fd)
            self._log("fsync", fd=fd)

    def ftruncate(self, fd, size):
        with self._lock:
            os.ftruncate(fd, size)
            self._log("truncate", fd=fd, size=size)

    def close(self, fd):
        with self._lock:
            os.close(fd)
            self._paths.pop(fd, None)
            self._log("close", fd=fd)

    def replace(self, src, dst):
        with self._lock:
            os.replace(src, dst)
            self._log("rename", src=self.rel(src), dst=self.rel(dst))

    def unlink(self, path):
        with self._lock:
            os.unlink(path)
            self._log("unlink", path=self.rel(path))

    def mkdir(self, path, mode=0o755):
        with self._lock:
            os.mkdir(path, mode)
            self._log("mkdir", path=self.rel(path))

    def fsync_dir(self, directory):
        with self._lock:
            rel = self.rel(directory)
            if self._refused(rel, "fsync"):
                raise self.fault.error()
            if self.skip("fsync_dir", rel):
                return
            super().fsync_dir(directory)
            subdirs = sorted(e.name for e in os.scandir(directory) if e.is_dir())
            self._log("fsync_dir", path=rel if rel != "." else "", subdirs=subdirs)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


@dataclass
class _Inode:
    durable: bytes = b""
    data: bytearray = field(default_factory=bytearray)
    cuts: list[int] = field(default_factory=list)  # ends of the writes since the last fsync
    appends_only: bool = True  # every change since the last fsync extended the file

    @property
    def dirty(self) -> bool:
        return self.data != self.durable

    def torn(self) -> range | None:
        """The lengths an unsynced append may leave (durable size .. current size), or None when
        the unsynced change is not a pure append (then it happened or not, nothing between)."""
        if self.appends_only and self.data.startswith(self.durable):
            return range(len(self.durable), len(self.data) + 1)
        return None


class FileSystem:
    """The volatile and the durable view of a recorded trace, replayed op by op."""

    def __init__(self) -> None:
        self.names: dict[str, object] = {"": DIR}
        self.durable_names: dict[str, object] = {"": DIR}
        self.pending: dict[str, list[tuple]] = defaultdict(list)
        self.inodes: dict[int, _Inode] = {}
        self.fds: dict[int, int] = {}

    def apply(self, op: str, f: dict) -> None:
        for key in ("path", "src"):
            if op in ("mkdir", "open", "rename") and key in f:
                self._made_outside(_parent(f[key]))
        if op == "mkdir":
            self.names[f["path"]] = DIR
            self.pending[_parent(f["path"])].append(("link", f["path"], DIR))
        elif op == "open":
            ino = self.names.get(f["path"])
            if ino is None:
                ino = len(self.inodes)
                self.inodes[ino] = _Inode()
                self.names[f["path"]] = ino
                self.pending[_parent(f["path"])].append(("link", f["path"], ino))
            elif f["trunc"] and self.inodes[ino].data:
                self._truncate(self.inodes[ino], 0)
            self.fds[f["fd"]] = ino
        elif op == "write":
            node = self.inodes[self.fds[f["fd"]]]
            off, data = f["offset"], f["data"]
            if off != len(node.data):
                node.appends_only = False
            node.data[off:off + len(data)] = data
            node.cuts.append(len(node.data))
        elif op == "truncate":
            self._truncate(self.inodes[self.fds[f["fd"]]], f["size"])
        elif op == "fsync":
            node = self.inodes[self.fds[f["fd"]]]
            node.durable, node.cuts, node.appends_only = bytes(node.data), [], True
        elif op == "close":
            self.fds.pop(f["fd"], None)
        elif op == "rename":
            self.names[f["dst"]] = self.names.pop(f["src"])
            assert _parent(f["src"]) == _parent(f["dst"]), "renames stay in one directory"
            self.pending[_parent(f["src"])].append(("rename", f["src"], f["dst"], self.names[f["dst"]]))
        elif op == "unlink":
            self.names.pop(f["path"])
            self.pending[_parent(f["path"])].append(("unlink", f["path"]))
        elif op == "fsync_dir":
            self._made_outside(f["path"])
            for name in f["subdirs"]:  # the fsync covers directories made without the seam
                child = f"{f['path']}/{name}" if f["path"] else name
                self.names.setdefault(child, DIR)
            _apply_names(self.durable_names, self.pending.pop(f["path"], []))
            for name in f["subdirs"]:
                child = f"{f['path']}/{name}" if f["path"] else name
                self.durable_names[child] = DIR

    def _made_outside(self, directory: str) -> None:
        """A directory first seen as a parent was made without the seam (a plain mkdir): it
        exists, but nothing made its name durable."""
        if directory not in self.names:
            self._made_outside(_parent(directory))
            self.names[directory] = DIR
            self.pending[_parent(directory)].append(("link", directory, DIR))

    @staticmethod
    def _truncate(node: _Inode, size: int) -> None:
        del node.data[size:]
        node.appends_only = False
        node.cuts.append(size)


def _apply_names(names: dict, ops: list[tuple]) -> None:
    for op in ops:
        if op[0] == "link":
            names[op[1]] = op[2]
        elif op[0] == "rename":
            _, src, dst, ino = op
            names[dst] = ino
            if names.get(src) == ino:
                del names[src]
        else:
            names.pop(op[1], None)


@dataclass(frozen=True)
class Image:
    """One disk a power cut may leave: relative path -> file bytes, plus the directories."""

    files: dict[str, bytes]
    dirs: frozenset[str]

    def digest(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + hashlib.sha256(self.files[path]).digest())
        h.update(repr(sorted(self.dirs)).encode())
        return h.hexdigest()

    def write(self, root: Path) -> None:
        for d in sorted(self.dirs):
            (root / d).mkdir(parents=True, exist_ok=True)
        for path, data in self.files.items():
            (root / path).write_bytes(data)


def _image(fs: FileSystem, dir_choice: dict[str, tuple], content: dict[int, bytes]) -> Image:
    names = dict(fs.durable_names)
    for d, ops in dir_choice.items():
        _apply_names(names, list(ops))

    def present(path: str) -> bool:
        return path == "" or (path in names and names.get(_parent(path)) == DIR
                              and present(_parent(path)))

    files, dirs = {}, set()
    for path, ino in names.items():
        if path and present(path):
            if ino == DIR:
                dirs.add(path)
            else:
                node = fs.inodes[ino]
                files[path] = content.get(ino, node.durable)
    return Image(files, frozenset(dirs))


def images(fs: FileSystem, rng: random.Random | None, torn_samples: int = 2,
           boundaries: int = 3) -> Iterator[Image]:
    """The images of the state `fs` is in.

    Always: every subset of each directory's unsynced name operations, each with every file at
    its two extremes (nothing unsynced kept / everything kept). Then the torn appends, one file
    at a time with the others at their extremes: with `rng=None` every torn length (see
    `EVERY_BYTE_UP_TO`); with `rng`
    the tears at the last `boundaries` write boundaries (whole records or lines lost from the
    end) plus `torn_samples` random byte positions.
    """
    dir_options = {d: _subsets(ops) for d, ops in fs.pending.items() if ops}
    dirty = {ino: node for ino, node in fs.inodes.items() if node.dirty and _reachable(fs, ino)}
    keys = sorted(dir_options)
    combos = itertools.product(*(dir_options[d] for d in keys))
    dir_combos = [dict(zip(keys, combo)) for combo in itertools.islice(combos, MAX_NAME_COMBOS)]
    if dir_combos:  # every name operation applied: the combination the tears are built on
        dir_combos.append({d: dir_options[d][-1] for d in keys})
    extremes = [{}, {ino: bytes(node.data) for ino, node in dirty.items()}]
    for choice in dir_combos or [{}]:
        for content in extremes:
            yield _image(fs, choice, content)
    every_name = dir_combos[-1] if dir_combos else {}
    for ino, node in dirty.items():
        lengths = node.torn()
        if lengths is None:
            continue
        if rng is None and len(lengths) <= EVERY_BYTE_UP_TO:
            picks = list(lengths)[1:-1]
        elif rng is None:  # a long event-file tail: every line, and many bytes
            bytes_rng = random.Random(len(lengths))
            picks = sorted({c for c in node.cuts if lengths.start < c < lengths.stop - 1})
            picks += [bytes_rng.randrange(lengths.start, lengths.stop) for _ in range(32)]
        else:
            picks = sorted({c for c in node.cuts if lengths.start < c < lengths.stop - 1})[-boundaries:]
            picks += [rng.randrange(lengths.start, lengths.stop) for _ in range(torn_samples)]
        for n in picks:
            for others in extremes:
                yield _image(fs, every_name, {**others, ino: bytes(node.data[:n])})


def _subsets(ops: list) -> list[tuple]:
    """Every subset (in order) of up to `ALL_SUBSETS_UP_TO` operations; of more (only a broken
    write order piles them up), every prefix and every all-but-one. The last is all of them."""
    n = len(ops)
    if n <= ALL_SUBSETS_UP_TO:
        return [tuple(op for i, op in enumerate(ops) if mask >> i & 1) for mask in range(2 ** n)]
    prefixes = [tuple(ops[:i]) for i in range(n)]
    return prefixes + [tuple(ops[:i] + ops[i + 1:]) for i in range(n)] + [tuple(ops)]


def _reachable(fs: FileSystem, ino: int) -> bool:
    return any(v == ino for v in fs.names.values()) or any(v == ino for v in fs.durable_names.values())
