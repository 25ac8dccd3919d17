"""The open-loop load generator of `tvbod bench daemon`: N plants stepping at set rates.

One process, one thread, one DEALER per plant (the daemon sees N adapters), all on one
`zmq.Poller`, plus a timer heap. Each plant's steps are scheduled at fixed slots
`offset + k / rate`, never after the previous reply (open loop). At its slot a plant tells the
measurement of the proposal it holds; once the tell is answered it asks for the next proposal:

- `ask_ready`: the ask is sent `ask_gap` periods after the tell's reply, so the daemon had that
  long to compute the proposal (the case "an ask that finds its proposal ready");
- `ask_waiting`: every `waiting_every`-th step asks at once on the tell's reply, so the ask may
  wait for that plant's refit and proposal.

The client cannot see inside the daemon: the two classes are defined by when the ask was sent.
A slot that finds the plant's previous step unfinished (a request unanswered, or its ask not yet
due) is a **missed slot** and is skipped. Round trips are send -> reply on this process's clock.
`observe` requests seed plants to a dataset size before the timed phases (one in flight per plant).
"""

from __future__ import annotations

import heapq
import math
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

from tvbod.bench.daemon_phases import LoadPhases
from tvbod.bench.daemon_plants import SimulatedPlant
from tvbod.bench.daemon_proc import DaemonProcess
from tvbod.protocol import decode_reply, encode, request_message

#: Request classes whose round trips are reported.
KINDS = ("ask_ready", "ask_waiting", "tell", "observe")
#: Error codes after which the same tell may be sent again (docs/protocol.md, section 5).
RETRYABLE = frozenset({"storage_unavailable", "overloaded", "internal"})
ADAPTER = "bench-load"


@dataclass(frozen=True)
class PlantSpec:
    name: str
    kind: str   # "box" | "arms" (daemon_plants)
    group: str  # what the report groups by: "box", "arms", "probe"
    rate: float  # steps per second
    seed_n: int = 0  # observations before the timed phases


@dataclass
class Inflight:
    kind: str
    rid: str
    sent: float
    phase: str
    record: bool


@dataclass
class PlantState:
    spec: PlantSpec
    index: int
    sock: zmq.Socket
    sim: SimulatedPlant | None = None
    seq: int = 0
    inflight: Inflight | None = None
    proposal: dict | None = None
    ask_due: bool = False
    active: bool = False
    generation: int = 0  # timers of an earlier activation are dropped
    steps: int = 0
    observed: int = 0
    dataset_size: int = 0
    last_reply: float = -math.inf

    @property
    def period(self) -> float:
        return 1.0 / self.spec.rate


@dataclass
class Recorder:
    """Round trips and counters keyed by (phase, group)."""

    samples: dict = field(default_factory=lambda: defaultdict(list))
    counts: dict = field(default_factory=lambda: defaultdict(Counter))

    def sample(self, phase: str, group: str, kind: str, seconds: float) -> None:
        self.samples[(phase, group, kind)].append(seconds)

    def count(self, phase: str, group: str, key: str, n: int = 1) -> None:
        self.counts[(phase, group)][key] += n


class LoadGenerator(LoadPhases):
    """Drives `plants` of the daemon at `endpoint`; `daemon` is watched (alive, CPU, memory)."""

    def __init__(self, endpoint: str, specs: list[PlantSpec], daemon: DaemonProcess, *,
                 ask_gap: float = 0.5, waiting_every: int = 5, progress_s: float = 5.0,
                 log: Callable[[str], None] | None = None) -> None:
        self.ctx = zmq.Context.instance()
        self.daemon = daemon
        self.ask_gap, self.waiting_every, self.progress_s = ask_gap, waiting_every, progress_s
        self.log = log or (lambda line: print(f"[bench daemon] {line}", file=sys.stderr,
                                              flush=True))
        self.prefix = uuid.uuid4().hex[:8]
        self.poller = zmq.Poller()
        self.plants: list[PlantState] = []
        self.by_sock: dict[zmq.Socket, PlantState] = {}
        for i, spec in enumerate(specs):
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            self.poller.register(sock, zmq.POLLIN)
            p = PlantState(spec, i, sock)
            self.plants.append(p)
            self.by_sock[sock] = p
        self.notify_fd: int | None = None
        self.rec = Recorder()
        self.heap: list[tuple[float, int, int, int, str]] = []
        self._tick = 0
        self.phase = ""
        self.measure_from = math.inf
        self.replies = 0
        self.stray = 0
        self.lag: dict[str, list[float]] = defaultdict(list)

    def watch_daemon(self, daemon: DaemonProcess) -> None:
        """Follow `daemon` (after a restart): its notifications are drained by the loop."""
        if self.notify_fd is not None:
            self.poller.unregister(self.notify_fd)
        self.daemon = daemon
        self.notify_fd = daemon.notify_fd()
        self.poller.register(self.notify_fd, zmq.POLLIN)

    def close(self) -> None:
        for p in self.plants:
            p.sock.close(linger=0)

    # ------------------------------------------------------------------ requests
    def _send(self, p: PlantState, kind: str, msg_type: str, **fields: Any) -> None:
        p.seq += 1
        rid = f"{self.prefix}-{p.index}-{p.seq}"
        payload = encode(request_message(msg_type, rid, plant=p.spec.name, adapter=ADAPTER,
                                         **fields))
        now = time.perf_counter()
        p.inflight = Inflight(kind, rid, now, self.phase, now >= self.measure_from)
        p.sock.send(payload)

    def _ask(self, p: PlantState, kind: str) -> None:
        p.ask_due = False
        self._send(p, kind, "ask")

    def _tell(self, p: PlantState) -> None:
        proposal = p.proposal
        self._send(p, "tell", "tell", proposal_id=proposal["proposal_id"],
                   measurement=p.sim.measure(proposal["gains"]))

    def _observe(self, p: PlantState) -> None:
        gains = p.sim.random_gains()
        self._send(p, "observe", "observe", gains=gains, measurement=p.sim.measure(gains))

    def _push(self, when: float, p: PlantState, action: str) -> None:
        self._tick += 1
        heapq.heappush(self.heap, (when, self._tick, p.index, p.generation, action))

    # ------------------------------------------------------------------ replies
    def _drain(self, sock: zmq.Socket) -> None:
        p = self.by_sock[sock]
        while True:
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.perf_counter()
            reply = decode_reply(raw)
            fl = p.inflight
            if fl is None or reply.get("id") != fl.rid:
                self.stray += 1  # a late reply to a request given up on
                continue
            p.inflight, p.last_reply = None, now
            self.replies += 1
            if fl.record and fl.kind in KINDS:
                self.rec.sample(fl.phase, p.spec.group, fl.kind, now - fl.sent)
            self._on_reply(p, fl, reply, now)

    def _on_reply(self, p: PlantState, fl: Inflight, reply: dict, now: float) -> None:
        if not reply["ok"]:
            code = reply["error"]["code"]
            self.rec.count(fl.phase, p.spec.group, f"error:{code}")
            if fl.kind == "hello":
                raise RuntimeError(f"hello for {p.spec.name}: {reply['error']}")
            if fl.kind == "tell" and code not in RETRYABLE:
                p.proposal = None  # ask again at the next slot
            return
        if fl.kind == "hello":
            p.sim = SimulatedPlant(p.spec.kind, reply["parameters"], seed=p.index)
        elif fl.kind in ("ask_ready", "ask_waiting"):
            p.proposal = {"proposal_id": reply["proposal_id"], "gains": reply["gains"]}
            if self.phase == "prime":
                self._tell(p)
        elif fl.kind == "tell":
            self._told(p, reply, now, fl.phase if fl.record else None)
        elif fl.kind == "observe":
            p.observed += 1
            p.dataset_size = int(reply["dataset_size"])
            self.rec.count(fl.phase, p.spec.group, "observed")
            self.rec.count(fl.phase, p.spec.group, "resets", int(bool(reply.get("reset"))))
            if p.observed < p.spec.seed_n:
                self._observe(p)

    def _told(self, p: PlantState, reply: dict, now: float, phase: str | None) -> None:
        """A step is done; `phase` is where it counts (None: sent during the warm-up)."""
        p.proposal = None
        p.steps += 1
        p.dataset_size = int(reply["dataset_size"])
        if phase is not None:
            self.rec.count(phase, p.spec.group, "steps")
            self.rec.count(phase, p.spec.group, "resets", int(bool(reply.get("reset"))))
        if not p.active:
            return
        if self.waiting_every and p.steps % self.waiting_every == 0:
            self._ask(p, "ask_waiting")
        else:
            p.ask_due = True
            self._push(now + self.ask_gap * p.period, p, "ask")

    # ------------------------------------------------------------------ timers
    def _fire_due(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            when, _, index, generation, action = heapq.heappop(self.heap)
            p = self.plants[index]
            if not p.active or generation != p.generation:
                continue
            if action == "ask":
                if p.ask_due and p.inflight is None:
                    self._ask(p, "ask_ready")
            else:
                self._slot(p, when, now)

    def _slot(self, p: PlantState, when: float, now: float) -> None:
        self._push(when + p.period, p, "slot")
        record = when >= self.measure_from
        if record:
            self.rec.count(self.phase, p.spec.group, "slots")
            self.lag[self.phase].append(now - when)  # > 0: this process was late (saturated)
        if p.inflight is not None or p.ask_due:
            if record:
                self.rec.count(self.phase, p.spec.group, "missed_slots")
            return
        if p.proposal is not None:
            self._tell(p)
        else:  # the first step, or after a refused tell
            gap = now - p.last_reply
            self._ask(p, "ask_ready" if gap >= self.ask_gap * p.period else "ask_waiting")

    # ------------------------------------------------------------------ the loop
    def _serve(self, until: float, done: Callable[[], bool], label: str) -> str | None:
        """Serve replies and timers until `until` (perf_counter) or `done()`: None; or the reason
        the phase had to end early (the daemon exited)."""
        next_progress = time.perf_counter() + self.progress_s
        started = time.perf_counter()
        while True:
            now = time.perf_counter()
            if done() or now >= until:
                return None
            self._fire_due(now)
            nxt = min(until, self.heap[0][0] if self.heap else until, next_progress)
            wait_ms = max(0, math.ceil((nxt - time.perf_counter()) * 1e3))
            for sock, _ in self.poller.poll(min(wait_ms, 250)):
                if sock == self.notify_fd:
                    self.daemon.drain_notifications()
                else:
                    self._drain(sock)
            if time.perf_counter() >= next_progress:
                next_progress += self.progress_s
                if not self.daemon.alive():
                    return f"the daemon exited (code {self.daemon.proc.returncode})"
                self.log(self._progress_line(label, time.perf_counter() - started))
