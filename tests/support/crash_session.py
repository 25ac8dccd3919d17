"""A real plant session recorded through the file-system seam, and the check of one crash image.

`record_session` runs the daemon's own `Server` (plant runtime, store, event files, group commit)
in a thread of this process, driven over ipc by a `LoggingClient`, with a `crash_model.Recorder`
installed as `tvbod.service.fsio`'s backend. Every reply is marked in the trace just before it
is sent. Optionally the process "dies" (SIGKILL-like: page cache kept, nothing else written) at
one journal fsync and a new server recovers the directory, as systemd would restart it. With a
`crash_model.Fault` the disk refuses calls at one site for a while: requests answered
`storage_unavailable` are sent again, and a server that stops (exit status 1 after a failed
journal fsync) or cannot restore the plant is started again, as systemd's `Restart=on-failure`.

`ImageChecker.check(image, acked)` recovers one image in-process and returns what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog
from crash_model import Fault, Image, Recorder, SimulatedCrash
from daemon_harness import Daemon, objective
from history import LoggingClient

from plant_adapters.client import DaemonError

from tvbod.protocol import decode_reply
from tvbod.service import fsio
from tvbod.service.config import load_daemon_config
from tvbod.service.events import EventSink, PlantEventLog
from tvbod.service.plant import PlantRuntime
from tvbod.service.recovery import RestoreError
from tvbod.service.event_files import load_epochs
from tvbod.commands.replay import load_history, recorded_optimizer, verify
from tvbod.service.server import Server
from tvbod.service.store import PlantStore

CHEAP_BUDGET = "{candidates: 24, starts: 1, maxiter: 0}"
PLANT = "alpha"
JOURNAL = f"state/plants/{PLANT}/journal"


def quiet_logger():
    """A real structlog logger whose stdout lines go nowhere (the event files are what counts)."""
    return structlog.wrap_logger(structlog.ReturnLogger(), processors=[])


@dataclass
class Session:
    root: Path
    trace: list[tuple[str, dict]]
    log: list[dict]
    proposals: dict[int, dict] = field(default_factory=dict)  # t -> the live proposal's reply
    tells: list[dict] = field(default_factory=list)  # the live tells in order: pid, t, y, rid
    fault: Fault | None = None
    site_calls: dict = field(default_factory=dict)  # (kind, op) -> calls made at that site
    site_log: list = field(default_factory=list)  # ((kind, op), acknowledged so far) per call
    refused: int = 0  # requests answered storage_unavailable

    @property
    def config(self):
        return load_daemon_config(self.root / "tvbod.yaml")


def _crash_close(server: Server) -> None:
    """What a SIGKILL leaves: fds and sockets closed, no checkpoint, nothing flushed. The kernel
    closes a dead process's sockets at once; ZeroMQ closes them on its I/O thread, so wait until
    the endpoint no longer accepts (the next server refuses a live endpoint)."""
    for plant in server.plants.values():
        plant.close()
    server.plants.clear()
    server.shutdown()
    _await_endpoint_free(server)


def _serve(recorder: Recorder, root: Path, stop: threading.Event, ready: threading.Event) -> None:
    """Serve until `stop`; after a simulated crash, a stop on a failed fsync or a start that
    could not restore the plant, start a new server on the same state."""
    import time

    config = load_daemon_config(root / "tvbod.yaml")
    while True:
        server = Server(config, EventSink(quiet_logger()))
        try:
            server.open()
        except Exception:  # noqa: BLE001 - the disk refused the restore: systemd starts again
            _crash_close(server)
            continue
        if PLANT not in server.plants:  # set aside by a refused restore: start again
            server.shutdown()
            time.sleep(0.01)
            continue
        server.bind()
        plain_send = server._send

        def send(frames, plain_send=plain_send):
            reply = decode_reply(frames[-1])
            recorder.mark(id=reply.get("id"), ok=reply.get("ok"), type=reply.get("type"))
            plain_send(frames)

        server._send = send
        ready.set()
        watcher = threading.Thread(target=lambda s=server: (stop.wait(), s.request_stop()), daemon=True)
        watcher.start()
        try:
            server.serve()
        except SimulatedCrash:
            _crash_close(server)
            continue
        server.shutdown()
        if server.exit_code == 0 or stop.is_set():
            return
        _await_endpoint_free(server)


def _await_endpoint_free(server: Server) -> None:
    import time

    from tvbod.service.server import probe_endpoint

    deadline = time.monotonic() + 60
    while any(probe_endpoint(e) for e in server.config.endpoints) and time.monotonic() < deadline:
        time.sleep(0.05)


def _until_stored(session: Session, call):
    """`call()` again while the daemon answers `storage_unavailable` (nothing was applied)."""
    import time

    while True:
        try:
            return call()
        except DaemonError as exc:
            if exc.code != "storage_unavailable":
                raise
            session.refused += 1
            time.sleep(0.005)


def record_session(root: Path, steps: int, checkpoint_every: int, crash_at_step: int | None,
                   skip=None, fault: Fault | None = None) -> Session:
    """Run `steps` ask/tell steps of `objective` (it jumps at t = 15: a reset) and record them."""
    Daemon(root, {PLANT: {"budget": CHEAP_BUDGET}}, checkpoint_every=checkpoint_every)  # files only
    recorder = Recorder(root, skip)
    recorder.fault = fault
    session = Session(root, recorder.trace, [], fault=fault, site_calls=recorder.site_calls,
                      site_log=recorder.site_log)
    stop, ready = threading.Event(), threading.Event()
    endpoint = f"ipc://{root}/run/tvbod.sock"
    with fsio.use(recorder):
        thread = threading.Thread(target=_serve, args=(recorder, root, stop, ready))
        thread.start()
        try:
            ready.wait(30)
            with LoggingClient(endpoint, PLANT, timeout_s=0.5, retries=200, log=session.log) as c:
                for step in range(1, steps + 2):
                    p = _until_stored(session, c.ask)
                    session.proposals[p["t"]] = p
                    if step > steps:
                        break  # the proposal after the last step: the reference for the end
                    if step == crash_at_step:
                        recorder.crash_at_fsync_of = JOURNAL
                    y = objective(p["gains"], p["t"])
                    r = _until_stored(session, lambda p=p, y=y: c.tell(p["proposal_id"], y))
                    session.tells.append({"pid": p["proposal_id"], "t": r["t"], "y": y,
                                          "rid": c.log[-2]["id"]})
        finally:
            stop.set()
            thread.join(60)
    assert recorder.crash_at_fsync_of is None, "the simulated crash did not happen"
    return session


def acked_rids(trace: list[tuple[str, dict]], k: int) -> set[str]:
    """Request ids whose ok reply was sent within the first `k` operations."""
    return {f["id"] for op, f in trace[:k] if op == "mark" and f["ok"]}


class ImageChecker:
    """Recovers images in-process and compares them with the live session."""

    def __init__(self, session: Session, workdir: Path) -> None:
        self.session = session
        self.workdir = workdir
        self.config = session.config
        self.plant_config = self.config.plants[0]
        self.pids = [t["pid"] for t in session.tells]
        self._verified: dict[str, tuple] = {}
        self._mappings: dict[str, dict | None] = {}
        self.replays = 0

    def check(self, image: Image, acked: set[str]) -> list[str]:
        """Everything wrong with recovering `image` after the replies in `acked` were sent."""
        root = self.workdir / "image"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        image.write(root)
        state = root / "state"
        plant_dir = state / "plants" / PLANT
        store = PlantStore(state, PLANT)
        runtime = PlantRuntime(self.plant_config, store,
                               PlantEventLog(store.events_path, PLANT, quiet_logger()),
                               request_cache=self.config.request_cache,
                               checkpoint_every=self.config.checkpoint_every)
        try:
            try:
                runtime.restore()
            except RestoreError as exc:
                return [f"recovery refused: {exc}"]
            problems = self._check_state(runtime, acked)
        finally:
            runtime.close()
        return problems + self._check_replay(plant_dir, runtime.state.tells)

    def _check_state(self, runtime: PlantRuntime, acked: set[str]) -> list[str]:
        k = runtime.state.tells
        told = list(runtime.state.told)
        problems = []
        if told != self.pids[:k] or runtime.strategy.t != k + 1:
            problems.append(f"recovered tells {told} (t={runtime.strategy.t}) are not the first {k} "
                            "live tells exactly once")
        lost = [t["pid"] for t in self.session.tells[k:] if t["rid"] in acked]
        if lost:
            problems.append(f"acknowledged tells lost: {lost}")
        live = self.session.proposals[k + 1]
        if runtime.proposal is not None:
            got = {"proposal_id": runtime.proposal["id"], "gains": runtime.proposal["gains"],
                   "t": runtime.proposal["t"]}
        else:
            x = runtime.strategy.ask()
            got = {"proposal_id": live["proposal_id"], "gains": runtime.config.gains(np.asarray(x)),
                   "t": runtime.strategy.t}
        want = {key: live[key] for key in ("proposal_id", "gains", "t")}
        if got != want:
            problems.append(f"next proposal {got} differs from the uninterrupted run's {want}")
        return problems

    def _check_replay(self, plant_dir: Path, tells: int) -> list[str]:
        """`tvbod replay`'s verify over the image's recorded history (memoized on its inputs)."""
        history = load_history(plant_dir) if (plant_dir / "events.jsonl").exists() else []
        if [e["proposal_id"] for e in history] != self.pids[:tells]:
            return [f"replay history {[e['proposal_id'] for e in history]} is not the "
                    f"{tells} recovered tells"]
        epochs = load_epochs(plant_dir)
        mapping = self._recorded_optimizer(plant_dir, epochs)
        key = json.dumps([mapping, [(t, m, i) for t, m, i in epochs],
                          [(e["t"], e["x"], e["measurement"], e["reset"], e["psi"]) for e in history]],
                         sort_keys=True, default=repr)
        if key not in self._verified:
            self.replays += 1
            self._verified[key] = verify(mapping, history, epochs) if mapping is not None else None
        result = self._verified[key]
        if result is None:
            return ["replay: no optimizer configuration recorded (no checkpoint)"]
        n, divergence, _, _ = result
        return [f"replay diverged after {n} steps: {divergence}"] if divergence else []


    def _recorded_optimizer(self, plant_dir: Path, epochs):
        """`replay.recorded_optimizer`, memoized on what it reads: the checkpoints (the journal
        does not change a recovered checkpoint's optimizer) or else the first start's file."""
        key = repr([hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
                    for p in (plant_dir / "checkpoint", plant_dir / "checkpoint.prev")])
        key += repr(epochs[:1]) if "'" not in key else ""
        if key not in self._mappings:
            try:
                self._mappings[key] = recorded_optimizer(plant_dir, None)
            except SystemExit:
                self._mappings[key] = None
        return self._mappings[key]


def first_call_after(session: Session, site: tuple[str, str], acks: int) -> int | None:
    """Which call at `site` (1-based) is the first one after `acks` acknowledged requests of
    `session` (a fault-free run: a faulty one follows it call for call up to the fault)."""
    index = 0
    for call_site, seen in session.site_log:
        if call_site == site:
            index += 1
            if seen >= acks:
                return index
    return None


def fault_problems(session: Session, steps: int, workdir: Path, memo: ImageChecker | None = None,
                   replay_cli: bool = True) -> list[str]:
    """What is wrong after a session with a storage fault, once space returned: a tell not
    acknowledged, a silent gap in the live history, a power cut or a restart after the
    session losing an acknowledged tell or leaving a history with a gap or one replay's verify
    does not reproduce; with `replay_cli`, the `tvbod replay` command run on it too."""
    import contextlib
    import io
    import random

    from crash_model import FileSystem, images

    from tvbod.commands import main as tvbod_main
    from tvbod.commands.replay import HistoryGap, checked_history

    problems = []
    if len(session.tells) != steps:
        problems.append(f"only {len(session.tells)} tells acknowledged")
    try:
        checked_history(session.root / "state" / "plants" / PLANT)
    except HistoryGap as exc:
        problems.append(f"live history: {exc}")
    fs = FileSystem()
    for op, fields in session.trace:
        fs.apply(op, fields)
    acked = acked_rids(session.trace, len(session.trace))
    checker = ImageChecker(session, workdir)
    if memo is not None:  # replays and optimizer mappings already verified by another session
        checker._verified, checker._mappings = memo._verified, memo._mappings
    seen = set()
    for image in images(fs, random.Random(0)):
        if image.digest() in seen:
            continue
        seen.add(image.digest())
        problems += [f"recovered: {p}" for p in checker.check(image, acked)]
        recovered = workdir / "image" / "state" / "plants" / PLANT
        try:
            checked_history(recovered)
        except HistoryGap as exc:
            problems.append(f"recovered history: {exc}")
        if replay_cli:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = tvbod_main(["replay", str(recovered)])
            if code != 0 or not out.getvalue().startswith("verified: "):
                problems.append(f"tvbod replay after recovery: exit {code}: {out.getvalue().strip()}")
    return problems
