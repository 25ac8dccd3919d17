"""The daemon's event loop: one ROUTER socket, one thread, every plant's state owned by the loop.

The server is composed of parts that receive their context explicitly: the `PlantHost`
(hosted.py: the plants, the quarantined ones, sink, metrics, model workers), the
`RequestHandler` (requests.py: every exception becomes an error reply in one place, so no client
mistake can stop the loop), the `GroupCommit` (group_commit.py) and the live reload
(live_reload.py). Signal handlers only set a flag and write to a wake-up socket that the poller
watches. The sockets are bound by tvbod/service/binding.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import time
import sys
from pathlib import Path

import zmq

from tvbod.errors import TvbodError
from tvbod.service.binding import bind_router, probe_endpoint
from tvbod.service.config import DaemonConfig
from tvbod.service.events import EventSink
from tvbod.service.faults import from_environment
from tvbod.service.group_commit import GroupCommit
from tvbod.service.hosted import PlantHost
from tvbod.service.live_reload import reload
from tvbod.service.metrics import Metrics
from tvbod.service.plant import PlantRuntime
from tvbod.service.requests import RequestHandler
from tvbod.service.sdnotify import Notifier, status_line
from tvbod.service.workers import ModelWorkers, ProcessModelWorkers

#: Messages handled per poll wake-up before housekeeping gets a turn.
_BATCH = 256
#: Idle poll timeout: how often timeouts are checked when nothing happens.
_IDLE_POLL_MS = 100
#: The daemon file's `model_worker_kind` (workers.py). Its default `model_workers: 2`: two, so
#: that one plant's long refit never holds every other plant's proposal up; more threads would
#: only add GIL contention with the loop (docs/benchmarks.md, *The daemon*).
_WORKERS = {"thread": ModelWorkers, "process": ProcessModelWorkers}
#: How long a thread may hold the GIL while another waits (CPython's default is 5 ms): short,
#: so a worker's Python code cannot delay the loop's replies by more than this per hand-over.
_SWITCH_INTERVAL_S = 0.0005


class DaemonLockedError(TvbodError):
    """Another daemon holds the state directory, or serves one of the configured endpoints."""


class Server:
    """Hosts one `PlantRuntime` per configured plant behind a ZeroMQ ROUTER socket."""

    def __init__(self, config: DaemonConfig, sink: EventSink, notifier: Notifier | None = None,
                 metrics: Metrics | None = None) -> None:
        self.sink = sink
        self.notifier = notifier or Notifier(None)
        self._status_dirty = True
        self._status_sent = 0.0
        self.ctx: zmq.Context | None = None
        self.sock: zmq.Socket | None = None
        self.stop_requested = False
        self.reload_requested = False
        self.exit_code = 0
        self._lock_fd: int | None = None
        self._guard = None  # the ZAP authenticator when CURVE is configured
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        writer, fault_check, hold = from_environment()
        workers = _WORKERS[config.model_worker_kind](config.model_workers, self._wake_w, hold)
        self.host = PlantHost(config, sink, metrics or Metrics(), workers, writer)
        self.requests = RequestHandler(self.host, fault_check)
        self.commit = GroupCommit(self.host)

    @property
    def config(self) -> DaemonConfig:
        return self.host.config

    @property
    def plants(self) -> dict[str, PlantRuntime]:
        return self.host.plants

    @property
    def quarantined(self) -> dict[str, str]:
        return self.host.quarantined

    @property
    def messages(self) -> int:
        return self.host.messages

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Lock the state directory and restore every plant (checkpoint + journal replay).

        A `state_dir` named in the daemon file is created only if its parent exists: a typo
        must not silently start an empty history somewhere else."""
        config = self.config
        state_dir = Path(config.state_dir)
        if config.state_dir_configured and not state_dir.parent.is_dir():
            raise DaemonLockedError(
                f"state_dir {state_dir} does not exist, nor does its parent {state_dir.parent} "
                f"(a typo in {config.path}?); create it (mkdir -p) if that is the place")
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = os.open(state_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DaemonLockedError(f"another tvbod daemon is using the state directory {state_dir}")
        for endpoint in config.endpoints:
            problem = probe_endpoint(endpoint)
            if problem:
                raise DaemonLockedError(problem)
        for pc in config.plants:
            self.host.open_or_quarantine(pc)

    def bind(self) -> list[str]:
        """Bind the ROUTER on every configured endpoint (ipc sockets are owner-only)."""
        self.ctx = zmq.Context.instance()
        self.sock, self._guard, bound = bind_router(self.ctx, self.config, self.sink)
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
        """Run until a stop is requested; each turn: finished model jobs and the requests they
        held, new messages, timeouts; then the group commit, the replies, checkpoints."""
        assert self.sock is not None
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r.fileno(), zmq.POLLIN)
        self._start_jobs()
        while not self.stop_requested:
            ready = dict(poller.poll(0 if self.requests.idle_proposals else _IDLE_POLL_MS))
            if self._wake_r.fileno() in ready:
                self._drain_wakeups()
            replies: list[list[bytes]] = []
            if self.reload_requested:
                self.reload_requested = False
                self.notifier.reloading()
                replies += self._collect(self.host.workers.wait_all())
                reload(self.host)
                self._start_jobs()
                self.notifier.ready(self.status_line())
            replies += self._collect(self.host.workers.collect())
            if self.sock in ready:
                replies += self._drain_socket()
            now = time.monotonic()
            for plant in self.plants.values():
                plant.tick(now)
            self.notifier.tick(now)
            self._status_dirty |= bool(replies)
            if self._status_dirty and now - self._status_sent >= 1.0:  # at most 1 STATUS= per s
                self._status_dirty, self._status_sent = False, now
                self.notifier.status(self.status_line())
            if not self.commit.sync_journals():
                self.exit_code, self.stop_requested = 1, True
                return  # nothing of this batch is acknowledged; restart recovers from disk
            for plant in self.plants.values():
                plant.synced()  # now the tells' event lines may be written
            for frames in replies:
                self._send(frames)
            self.commit.checkpoint_due_plants()
            self._propose_when_idle()

    def _propose_when_idle(self) -> None:
        """Compute one light plant's next proposal (workers.py `light_model`: no worker job takes
        it) on the loop while no message waits, so that its ask, sent after the tell's reply,
        only journals it. A message that arrives meanwhile waits for one plant's model work at
        most, the work its own ask would have cost; as with a worker job, no result depends on
        when this runs (a proposal is a pure function of the state and the step's seed)."""
        idle = self.requests.idle_proposals
        while idle and not self.sock.get(zmq.EVENTS) & zmq.POLLIN:
            name = next(iter(idle))
            del idle[name]
            plant = self.plants.get(name)  # None: removed by a reload
            if plant is not None and not self.host.workers.busy(name) and plant.has_work(True):
                plant.propose_on_loop()
                return

    def _collect(self, finished) -> list[list[bytes]]:
        """Hand finished jobs to their plants; the replies to the requests they held.

        A plant whose checkpoint fell due while its job ran is checkpointed here, before any of
        its held requests is answered: so a reply to a plant's request that follows a tell comes
        after that tell's due checkpoint, as when the model work ran on the loop."""
        collected = []
        for name, outcome in finished:
            plant = self.plants.get(name)
            if plant is not None:
                plant.job_done(outcome)
                collected.append(plant)
        self.commit.checkpoint_due_plants(collected)
        if not collected and not self.requests.parked_status:
            return []
        return self.requests.resume([p.name for p in collected])

    def _start_jobs(self) -> None:
        """Prepare every plant whose next step is not computed (at start, after a reload)."""
        for plant in self.plants.values():
            self.host.workers.start(plant)

    def status_line(self) -> str:
        """The `STATUS=` text for systemd: plants, their adapters and last resets."""
        return status_line([p.status() for p in self.plants.values()], sorted(self.quarantined))

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
            reply = self.requests.handle(frames)
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

    def shutdown(self) -> None:
        """Checkpoint every plant, close the socket (linger 0) and release the lock."""
        self.notifier.stopping()
        self.host.workers.wait_all()  # a job's result is recomputable; the checkpoint needs it
        self.host.workers.shutdown()
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
        self.commit.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

