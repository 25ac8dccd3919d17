"""The daemon's event loop: one ROUTER socket, one thread, every plant's state owned by the loop.

Messages are validated, dispatched through a plain dict of handlers, and every exception becomes
an error reply in exactly one place (`_handle`), so no client mistake can stop the loop. Signal
handlers only set a flag and write to a wake-up socket that the poller watches.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import signal
import socket
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import zmq

from tvbod import __version__
from tvbod.errors import TvbodError
from tvbod.protocol import (
    ErrorCode, Hello, PingReply, ProtocolError, Reply, Status, StatusReply, decode_request, encode,
    error_reply, split_envelope,
)
from tvbod.service.config import ConfigError, DaemonConfig, load_daemon_config
from tvbod.service.events import EventSink
from tvbod.service.faults import from_environment
from tvbod.service.metrics import Metrics
from tvbod.service.plant import PlantRuntime, RestoreError
from tvbod.service.reload import ReloadRefused, plan_reload
from tvbod.service.sdnotify import Notifier, status_line
from tvbod.service.store import PlantStore, StorageError

#: Messages handled per poll wake-up before housekeeping gets a turn.
_BATCH = 256
#: Idle poll timeout: how often timeouts are checked when nothing happens.
_IDLE_POLL_MS = 100
#: Threads that fsync the journals of one batch concurrently (ext4 folds them into one commit).
_SYNC_THREADS = 16
#: client_error events per peer per window before they are only counted.
_CLIENT_ERROR_BURST = 20
_CLIENT_ERROR_WINDOW_S = 10.0


def _private_directory(path: Path) -> None:
    """Create `path` (mode 0700) for the ipc socket, refusing one another user owns."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise OSError(errno.EPERM, f"runtime directory {path} belongs to uid {st.st_uid}, not to "
                      f"this daemon's uid {os.getuid()}; refusing to put the socket there")


class DaemonLockedError(TvbodError):
    """Another daemon holds the state directory, or serves one of the configured endpoints."""


def probe_endpoint(endpoint: str) -> str | None:
    """Why `endpoint` cannot be bound (a live daemon answers on it), or None.

    An ipc socket file that accepts a connection belongs to a running process: binding over it
    would silently steal it (ZeroMQ unlinks the file). A file nobody listens on is stale (a
    killed daemon) and is replaced. A tcp port is tried with a plain bind.
    """
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        if not os.path.exists(path):
            return None
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            return None  # ECONNREFUSED: stale socket file
        finally:
            probe.close()
        return f"{endpoint} is served by a running process (another tvbod daemon?); stop it or " \
               "configure another endpoint"
    rest = endpoint[len("tcp://"):]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if host in ("*", "localhost", "") or not port.isdigit():
        return None  # ZeroMQ resolves these itself; its bind error says EADDRINUSE
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ: TIME_WAIT is fine
    try:
        probe.bind((host, int(port)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"{endpoint}: the port is already in use (another tvbod daemon?); stop it or " \
                   "configure another endpoint"
        return None
    finally:
        probe.close()
    return None


class ClientErrorLimiter:
    """Log the first few client errors of a peer per window, count the rest (fuzzers are loud)."""

    def __init__(self) -> None:
        self.windows: dict[bytes, tuple[float, int, int]] = {}

    def allow(self, peer: bytes, now: float) -> tuple[bool, int]:
        """`(log this one?, errors suppressed in the peer's previous window, to report now)`."""
        start, count, dropped = self.windows.get(peer, (now, 0, 0))
        reported = 0
        if now - start > _CLIENT_ERROR_WINDOW_S:
            reported, start, count, dropped = dropped, now, 0, 0
        count += 1
        ok = count <= _CLIENT_ERROR_BURST
        self.windows[peer] = (start, count, dropped + (not ok))
        if len(self.windows) > 10_000:
            self.windows.clear()
        return ok, reported


class Server:
    """Hosts one `PlantRuntime` per configured plant behind a ZeroMQ ROUTER socket."""

    def __init__(self, config: DaemonConfig, sink: EventSink, notifier: Notifier | None = None,
                 metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.sink = sink
        self.notifier = notifier or Notifier(None)
        self._status_dirty = True
        self._status_sent = 0.0
        self.plants: dict[str, PlantRuntime] = {}
        self.ctx: zmq.Context | None = None
        self.sock: zmq.Socket | None = None
        self.started = time.time()
        self.stop_requested = False
        self.reload_requested = False
        self.exit_code = 0
        self.messages = 0
        self._sync_pool: ThreadPoolExecutor | None = None
        self._lock_fd: int | None = None
        self._guard = None  # the ZAP authenticator when CURVE is configured
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._errors = ClientErrorLimiter()
        self._writer, self._fault_check = from_environment()
        self._handlers: dict[str, Callable[[Any], Reply]] = {
            "hello": self._hello, "ask": self._ask, "tell": self._tell,
            "status": self._status, "ping": self._ping,
            "best": self._best, "observe": self._observe,
        }

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Lock the state directory and restore every plant (checkpoint + journal replay).

        A `state_dir` named in the daemon file is created only if its parent exists: a typo
        must not silently start an empty history somewhere else."""
        state_dir = Path(self.config.state_dir)
        if self.config.state_dir_configured and not state_dir.parent.is_dir():
            raise DaemonLockedError(
                f"state_dir {state_dir} does not exist, nor does its parent {state_dir.parent} "
                f"(a typo in {self.config.path}?); create it (mkdir -p) if that is the place")
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = os.open(state_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DaemonLockedError(f"another tvbod daemon is using the state directory {state_dir}")
        for endpoint in self.config.endpoints:
            problem = probe_endpoint(endpoint)
            if problem:
                raise DaemonLockedError(problem)
        for pc in self.config.plants:
            self.plants[pc.name] = self._open_plant(pc)

    def _open_plant(self, pc) -> PlantRuntime:
        store = PlantStore(Path(self.config.state_dir), pc.name, writer=self._writer)
        store.directory.mkdir(parents=True, exist_ok=True)
        runtime = PlantRuntime(
            pc, store, self.sink.plant(pc.name, store.events_path),
            request_cache=self.config.request_cache,
            checkpoint_every=self.config.checkpoint_every,
            ask_time_budget_ms=self.config.ask_time_budget_ms,
            events_segment_bytes=self.config.events_segment_bytes,
            events_keep_segments=self.config.events_keep_segments,
        )
        try:
            runtime.restore()
        except Exception:
            runtime.close()
            raise
        return runtime

    def bind(self) -> list[str]:
        """Bind the ROUTER on every configured endpoint (ipc sockets are owner-only)."""
        self.ctx = zmq.Context.instance()
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # Frames beyond twice the limit are dropped by libzmq (the peer is disconnected); the
        # ones in between are read and answered with `too_large`.
        sock.setsockopt(zmq.MAXMSGSIZE, 2 * self.config.max_message_bytes)
        sock.setsockopt(zmq.RCVHWM, 1000 * max(1, self.config.max_pending_per_client))
        sock.setsockopt(zmq.SNDHWM, 10_000)
        if any("[" in e for e in self.config.endpoints):
            sock.setsockopt(zmq.IPV6, 1)
        # --- security (tvbod/service/security.py): CURVE server + ZAP allow-list, before any bind
        from tvbod.service.security import guard_socket

        self._guard = guard_socket(self.ctx, sock, self.config.curve, self.sink)
        # --- end security
        bound = []
        for endpoint in self.config.endpoints:
            if endpoint.startswith("ipc://"):
                _private_directory(Path(endpoint[len("ipc://"):]).parent)
                old = os.umask(0o077)
                try:
                    sock.bind(endpoint)
                finally:
                    os.umask(old)
            else:
                sock.bind(endpoint)
            bound.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        self.sock = sock
        return bound

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT/SIGHUP only set a flag; the wake-up fd makes the poller return at once."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_reload_signal)

    def _on_stop_signal(self, signum, frame) -> None:  # noqa: ARG002
        self.stop_requested = True

    def _on_reload_signal(self, signum, frame) -> None:  # noqa: ARG002
        self.reload_requested = True

    def request_stop(self) -> None:
        self.stop_requested = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def serve(self) -> None:
        """Run until a stop is requested; each turn: messages, then timeouts, then idle work."""
        assert self.sock is not None
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r.fileno(), zmq.POLLIN)
        needs_prep = True
        while not self.stop_requested:
            ready = dict(poller.poll(0 if needs_prep else _IDLE_POLL_MS))
            if self._wake_r.fileno() in ready:
                self._drain_wakeups()
            if self.reload_requested:
                self.reload_requested = False
                self.notifier.reloading()
                self.reload()
                self.notifier.ready(self.status_line())
            replies: list[list[bytes]] = []
            if self.sock in ready:
                replies = self._drain_socket()
            now = time.monotonic()
            for plant in self.plants.values():
                plant.tick(now)
            self.notifier.tick(now)
            self._status_dirty |= bool(replies)
            if self._status_dirty and now - self._status_sent >= 1.0:  # at most 1 STATUS= per s
                self._status_dirty, self._status_sent = False, now
                self.notifier.status(self.status_line())
            if not self._sync_journals():
                return  # nothing of this batch is acknowledged; restart recovers from disk
            for plant in self.plants.values():
                plant.synced()  # now the tells' event lines may be written
            for frames in replies:
                self._send(frames)
            self._checkpoint_due_plants()
            needs_prep = True if replies else self._prepare_one()

    def _pool(self) -> ThreadPoolExecutor:
        if self._sync_pool is None:
            self._sync_pool = ThreadPoolExecutor(_SYNC_THREADS, "tvbod-io")
        return self._sync_pool

    def _checkpoint_due_plants(self) -> None:
        """Checkpoint every plant whose journal is long enough, the file I/O concurrently.

        Runs after the batch's replies went out; state snapshots are taken on this thread, and
        each worker touches only its own plant's files.
        """
        due = [(p, p.state()) for p in self.plants.values() if p.checkpoint_due]
        if not due:
            return

        def write(item):
            plant, state = item
            try:
                return plant, plant.write_checkpoint(state), None
            except StorageError as exc:
                return plant, None, exc

        results = [write(due[0])] if len(due) == 1 else list(self._pool().map(write, due))
        for plant, path, error in results:
            plant.checkpoint_done(path, error, "periodic")

    def _sync_journals(self) -> bool:
        """Group commit: fsync every journal this batch wrote, concurrently. False on failure."""
        dirty = [p.store.journal for p in self.plants.values() if p.store.journal.unsynced]
        start = time.perf_counter()
        try:
            if len(dirty) == 1:
                dirty[0].sync()
            elif dirty:
                list(self._pool().map(lambda j: j.sync(), dirty))
        except StorageError as exc:
            # After a failed fsync the page cache cannot be trusted (the PostgreSQL lesson):
            # stop without replying; a restart recovers from what is really on disk.
            self.sink.emit("storage_error", level="critical", what="journal fsync", error=str(exc),
                           action="stopping; restart recovers from the journal on disk")
            self.exit_code = 1
            self.stop_requested = True
            return False
        if dirty:
            self.metrics.fsync(time.perf_counter() - start)
        return True

    def status_line(self) -> str:
        """The `STATUS=` text for systemd: plants, their adapters and last resets."""
        return status_line([p.status() for p in self.plants.values()])

    def reload(self) -> bool:
        """Apply the daemon and plant files anew (SIGHUP), all or nothing.

        New plants are restored and served, removed plants are checkpointed and closed, changed
        plants keep their data under the new optimizer settings (tvbod/service/reload.py says
        which changes are allowed). An invalid or refused configuration changes nothing.
        """
        try:
            # Resolve `log_format: auto` as the start did, or it would always look changed.
            new = load_daemon_config(self.config.path, isatty=sys.stdout.isatty())
            plan = plan_reload(self.config, new)
            prepared = [(pc, self.plants[pc.name].prepare_reconfigure(pc), keys)
                        for pc, keys in plan.changed]
        except (ConfigError, ReloadRefused) as exc:
            self.sink.emit("config_reload_failed", level="error", error=str(exc),
                           action="the running configuration is kept")
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. a state that does not fit the new spec
            self.sink.emit("config_reload_failed", level="error", error=repr(exc),
                           action="the running configuration is kept")
            return False
        opened: dict[str, PlantRuntime] = {}
        try:
            for pc in plan.added:
                opened[pc.name] = self._open_plant(pc)
        except (RestoreError, Exception) as exc:  # noqa: BLE001
            for runtime in opened.values():
                runtime.close()
            self.sink.emit("config_reload_failed", level="error", error=str(exc),
                           action="the running configuration is kept")
            return False
        for name in plan.removed:
            runtime = self.plants.pop(name)
            try:
                runtime.checkpoint("removed")
            except StorageError as exc:
                runtime.events.emit("storage_error", level="error", what="checkpoint", error=str(exc))
            runtime.events.emit("plant_removed", t=runtime.strategy.t)
            runtime.close()
        for pc, strategy, keys in prepared:
            self.plants[pc.name].reconfigure(pc, strategy, keys)
        self.plants.update(opened)
        for runtime in self.plants.values():
            runtime.request_cache = new.request_cache
            runtime.checkpoint_every = new.checkpoint_every
            runtime.ask_time_budget_ms = new.ask_time_budget_ms
            runtime.events_segment_bytes = new.events_segment_bytes
            runtime.events_keep_segments = new.events_keep_segments
        self.config = dataclasses.replace(
            new, **{k: getattr(self.config, k) for k in plan.restart_only})
        self.sink.emit("config_reloaded", added=[p.name for p in plan.added], removed=plan.removed,
                       changed={pc.name: keys for pc, keys in plan.changed},
                       restart_required_for=plan.restart_only)
        return True

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _drain_socket(self) -> list[list[bytes]]:
        """Handle up to `_BATCH` waiting messages; returns their reply frames (not yet sent)."""
        replies: list[list[bytes]] = []
        n = 0
        while n < _BATCH and not self.stop_requested:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    break
                raise
            n += 1
            reply = self._handle(frames)
            if reply is not None:
                replies.append(reply)
        return replies

    def _send(self, frames: list[bytes]) -> None:
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            # The peer is gone (EHOSTUNREACH) or not reading (EAGAIN): it will retry.
            if exc.errno not in (errno.EHOSTUNREACH, zmq.EAGAIN):
                raise

    def _prepare_one(self) -> bool:
        """Compute one plant's next proposal ahead of its `ask`; True if work remains."""
        for plant in self.plants.values():
            try:
                if plant.prepare():
                    return True
            except Exception as exc:  # noqa: BLE001 - preparation is an optimisation only
                plant.events.emit("internal_error", level="error", where="prepare", error=repr(exc))
        return False

    def shutdown(self) -> None:
        """Checkpoint every plant, close the socket (linger 0) and release the lock."""
        self.notifier.stopping()
        for plant in self.plants.values():
            try:
                plant.checkpoint("stop")
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                plant.events.emit("storage_error", level="error", what="final checkpoint",
                                  error=str(exc))
            plant.close()
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None
        # --- security: stop the ZAP authenticator after the socket it guards is closed
        if getattr(self, "_guard", None) is not None:
            self._guard.stop()
            self._guard = None
        # --- end security
        self._wake_r.close()
        self._wake_w.close()
        if self._sync_pool is not None:
            self._sync_pool.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ requests
    def _handle(self, frames: list[bytes]) -> list[bytes] | None:
        """Turn one multipart message into reply frames; every failure becomes an error reply.

        The one place errors become codes: a `ProtocolError` carries its own (the request's id
        when the raiser gave none), a `StorageError` is `storage_unavailable`, anything else
        `internal`."""
        self.messages += 1
        peer = frames[0] if frames else b""
        try:
            env = split_envelope(frames)
        except ProtocolError as exc:
            self.metrics.message("invalid")
            self._client_error(peer, exc)
            return [peer, encode(exc.to_reply())] if peer else None
        req = None
        try:
            try:
                req = decode_request(env.payload, self.config.max_message_bytes)
            finally:
                self.metrics.message(req.type if req is not None else "invalid")
            if self._fault_check is not None:
                self._fault_check()
            reply = self._handlers[req.type](req).to_message()
        except (ProtocolError, StorageError) as exc:
            if isinstance(exc, StorageError):
                exc = ProtocolError(ErrorCode.STORAGE_UNAVAILABLE,
                                    f"the daemon cannot persist to its state directory: {exc}")
            if exc.request_id is None and req is not None:
                exc.request_id = req.request_id
            self._client_error(peer, exc)
            reply = exc.to_reply()
        except Exception as exc:  # noqa: BLE001 - the one place internal errors become replies
            self.sink.emit("internal_error", level="error", error=repr(exc),
                           traceback=traceback.format_exc(limit=8))
            rid = req.request_id if req is not None else None
            self.metrics.client_error(str(ErrorCode.INTERNAL))
            reply = error_reply(rid, ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}")
        return env.reply_frames(encode(reply))

    def _client_error(self, peer: bytes, exc: ProtocolError) -> None:
        self.metrics.client_error(str(exc.code))
        ok, dropped = self._errors.allow(peer, time.monotonic())
        if dropped:
            self.sink.emit("client_error", level="warning", peer=peer.hex(), code="suppressed",
                           suppressed=dropped)
        if ok:
            self.sink.emit("client_error", peer=peer.hex(), code=str(exc.code),
                           message=exc.message, request_id=exc.request_id)

    def _plant(self, req) -> PlantRuntime:
        plant = self.plants.get(req.plant)
        if plant is None:
            raise ProtocolError(ErrorCode.UNKNOWN_PLANT,
                                f"no plant named {req.plant!r}; this daemon hosts "
                                f"{', '.join(sorted(self.plants)) or 'none'}", req.request_id)
        return plant

    def _timed(self, req, handler: Callable[[Any], Reply]) -> Reply:
        """`handler(req)`, its service time recorded for the metrics (the plant-changing
        requests: ask, tell, observe)."""
        start = time.perf_counter()
        try:
            return handler(req)
        finally:
            self.metrics.request(req.type, time.perf_counter() - start)

    def _hello(self, req: Hello) -> Reply:
        return self._plant(req).hello(req)

    def _ask(self, req) -> Reply:
        return self._timed(req, self._plant(req).ask)

    def _tell(self, req) -> Reply:
        return self._timed(req, self._plant(req).tell)

    def _observe(self, req) -> Reply:
        return self._timed(req, self._plant(req).observe)

    def _best(self, req) -> Reply:
        return self._plant(req).best(req)

    def _status(self, req: Status) -> Reply:
        plants = [self._plant(req)] if req.plant is not None else list(self.plants.values())
        return StatusReply(req.request_id, plants=[p.status(with_best=True) for p in plants],
                           daemon={"version": __version__, "pid": os.getpid(),
                                   "uptime_s": round(time.time() - self.started, 3),
                                   "messages": self.messages})

    def _ping(self, req) -> Reply:
        return PingReply(req.request_id, pong=True, time=time.time())

