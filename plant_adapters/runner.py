"""The loop every adapter runs: hello -> (ask -> run the plant -> tell)* until its last step.

How far it goes is a `Horizon`: `steps` more steps from where the plant is (the hello reply's
next step, so a rerun on kept state goes on), or up to the absolute step `until`; a plant with a
finite record (`limit`, e.g. replayed data) stops at its end. A session with nothing to do (the
plant is already past `until` or `limit`) raises `NothingToDo` before asking for anything.
A plant is anything with `run(gains, t) -> Outcome`. The runner prints one progress line per step
(step, gains, measurement, regret when the plant knows it, a RESET marker), appends every step to
a JSON-lines record file, resumes a pending proposal after a restart, and stops cleanly on
SIGINT/SIGTERM: the step in hand is finished and told, then the loop ends.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from tvbod.client import DaemonClient
from tvbod.errors import TvbodError
from tvbod.protocol import AskReply, HelloReply, TellReply, parse_reply

#: Exit status of an adapter that had nothing to do: the plant is already past the step it was
#: told to reach (`--until`) or past the end of the adapter's data. Distinct from 0 (steps run),
#: 1 (the daemon silent or refusing) and 2 (a usage or settings error).
NOTHING_TO_DO = 3


class NothingToDo(TvbodError):
    """The session would run no step; the message says why (one line for the user)."""


@dataclass(frozen=True)
class Horizon:
    """How far a session goes: `steps` more steps, or up to step `until` (exactly one of them),
    never beyond step `limit` (the plant's own last step; None: no such end)."""

    steps: int | None = None
    until: int | None = None
    limit: int | None = None

    def _wanted(self, next_t: int) -> int:
        return next_t + self.steps - 1 if self.steps is not None else self.until

    def last_step(self, next_t: int) -> int:
        """The last step to run when the plant's next step is `next_t` (< next_t: none)."""
        return self._wanted(next_t) if self.limit is None else min(self._wanted(next_t), self.limit)

    def cut(self, next_t: int) -> bool:
        """True when `limit` ends the session before `steps` or `until` would."""
        return self.limit is not None and self._wanted(next_t) > self.limit

    def nothing_to_do(self, next_t: int) -> str:
        """Why a session starting at `next_t` runs no step."""
        done = next_t - 1
        if self.cut(next_t):
            return (f"nothing to do: the plant has done {done} steps and the data ends at step "
                    f"{self.limit}; no step was run")
        return (f"nothing to do: the plant has done {done} steps, so its horizon (--until / "
                f"until:) {self.until} is reached; no step was run (--steps N runs N more)")


@dataclass(frozen=True)
class Outcome:
    """One plant run: the measurement (None if `failed`), the exact regret if known, extras."""

    measurement: float | None
    failed: bool = False
    regret: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Plant(Protocol):
    name: str

    def run(self, gains: dict[str, float], t: int) -> Outcome: ...


@dataclass(frozen=True)
class StepRecord:
    t: int
    proposal_id: str
    gains: dict[str, float]
    measurement: float | None
    failed: bool
    regret: float | None
    reset: bool
    psi: float
    threshold: float
    dataset_size: int
    duplicate: bool
    wall_time: float
    info: dict[str, Any]


@dataclass(eq=False)
class Runner:
    """Drives one plant against the daemon for the steps `horizon` allows from the plant's step.

    `record_path`: the JSON-lines record file (None: none); `out`: where progress goes;
    `speed_delay_s`: a pause after each step (a demo's pace)."""

    client: DaemonClient
    plant: Plant
    horizon: Horizon
    _: KW_ONLY
    record_path: Path | None = None
    out: TextIO = sys.stdout
    speed_delay_s: float = 0.0
    stop_requested: bool = field(default=False, init=False)
    records: list[StepRecord] = field(default_factory=list, init=False)

    def install_signal_handlers(self) -> None:
        def stop(signum, frame):  # noqa: ARG001
            if self.stop_requested:
                raise KeyboardInterrupt
            self.stop_requested = True
            print(f"[{self.client.plant}] stopping after this step", file=self.out, flush=True)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)

    def run(self) -> list[StepRecord]:
        hello: HelloReply = parse_reply(self.client.hello())
        last = self.horizon.last_step(hello.t)
        print(f"[{self.client.plant}] connected to {self.client.endpoint}: plant {hello.plant!r}, "
              f"{len(hello.parameters)} parameter(s), next step {hello.t}"
              + (f", steps {hello.t}..{last}" if last >= hello.t else "")
              + (" (where its data ends)" if self.horizon.cut(hello.t) else "")
              + (f", resuming pending proposal {hello.pending['proposal_id']}"
                 if hello.pending else ""), file=self.out, flush=True)
        if last < hello.t:
            raise NothingToDo(self.horizon.nothing_to_do(hello.t))
        t = hello.t
        while t <= last and not self.stop_requested:
            t = self.step() + 1
        return self.records

    def step(self) -> int:
        proposal: AskReply = parse_reply(self.client.ask())
        t, gains = proposal.t, proposal.gains
        start = time.time()
        outcome = self.plant.run(gains, t)
        metadata = {k: v for k, v in outcome.info.items() if isinstance(v, (int, float, str, bool))}
        if outcome.regret is not None:
            metadata["regret"] = outcome.regret
        reply: TellReply = parse_reply(self.client.tell(
            proposal.proposal_id, outcome.measurement, failed=outcome.failed,
            metadata=metadata or None))
        record = StepRecord(
            t=t, proposal_id=proposal.proposal_id, gains=gains, measurement=reply.measurement,
            failed=outcome.failed, regret=outcome.regret, reset=reply.reset, psi=reply.psi,
            threshold=reply.threshold, dataset_size=reply.dataset_size,
            duplicate=reply.duplicate, wall_time=start, info=outcome.info)
        self.records.append(record)
        self._write(record)
        self._progress(record)
        if self.speed_delay_s > 0:
            time.sleep(self.speed_delay_s)
        return t

    def _write(self, record: StepRecord) -> None:
        if self.record_path is None:
            return
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.record_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(record)) + "\n")

    def _progress(self, r: StepRecord) -> None:
        gains = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r.gains.items())
        meas = "FAILED" if r.failed else f"{r.measurement:.5g}"
        regret = "" if r.regret is None else f"  regret {r.regret:.4g}"
        reset = f"  RESET (psi {r.psi:.3g} > {r.threshold:.3g})" if r.reset else ""
        print(f"[{self.client.plant}] t={r.t:<4d} {gains}  -> {meas}{regret}  |D|={r.dataset_size}{reset}",
              file=self.out, flush=True)

