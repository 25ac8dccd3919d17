"""A client-side history of every request and reply, and a checker that judges a run by that
history and the final state alone (the Jepsen idea: no acknowledged write may be missing).

`LoggingClient` is the reference `DaemonClient` with one addition: each logical request (all its
Lazy-Pirate retries share one id) is logged before it is sent and again with its outcome - the
reply, the error reply, or `unavailable`. `check_history(log, plant_dir)` then asserts

- no lost acknowledged tell: every tell with an ok reply is in the plant's recorded history
  (what `tvbod replay` reads) at the reply's step, with the measurement the reply confirmed;
- no duplicate: the history has each step once, steps 1..T without a gap, each proposal id once,
  the daemon's tell counter agrees with it (nothing was applied twice) and, when the client saw
  every reply, nothing in it was never acknowledged;
- monotonic steps: per plant, the steps of successive acknowledged new tells strictly increase,
  each tell's step is its proposal's step, and no ask is answered with a step already told.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from plant_adapters.client import DaemonClient, DaemonError, DaemonUnavailable


class LoggingClient(DaemonClient):
    """`DaemonClient` that appends `{"op": "request" | "reply" | "error" | "unavailable", ...}`."""

    def __init__(self, *args: Any, log: list[dict], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.log = log

    def request(self, msg_type: str, request_id: str | None = None, **fields: Any) -> dict:
        rid = request_id or self.new_request_id()
        self.log.append({"op": "request", "id": rid, "type": msg_type, "time": time.monotonic(),
                         **{k: v for k, v in fields.items() if v is not None}})
        try:
            reply = super().request(msg_type, rid, **fields)
        except DaemonError as exc:
            self.log.append({"op": "error", "id": rid, "code": exc.code})
            raise
        except DaemonUnavailable:
            self.log.append({"op": "unavailable", "id": rid})
            raise
        self.log.append({"op": "reply", "id": rid, "reply": reply})
        return reply


def acknowledged_tells(log: list[dict]) -> list[dict]:
    """`{plant, proposal_id, t, measurement, duplicate}` of every tell with an ok reply, in order."""
    requests = {e["id"]: e for e in log if e["op"] == "request"}
    out = []
    for e in log:
        if e["op"] == "reply" and requests[e["id"]]["type"] == "tell":
            req, reply = requests[e["id"]], e["reply"]
            out.append({"plant": req["plant"], "proposal_id": req["proposal_id"], "t": reply["t"],
                        "measurement": reply["measurement"], "duplicate": reply["duplicate"]})
    return out


def recorded_history(plant_dir: Path) -> list[dict]:
    """The plant's measurements as `tvbod replay` reads them (one per proposal id, by step)."""
    from tvbod.commands.replay import load_history

    return load_history(plant_dir)


def check_history(log: list[dict], plant_dir: Path, tells_counted: int | None = None,
                  complete: bool = True) -> dict:
    """Assert the three properties above for the plant stored in `plant_dir`; returns counts.

    `tells_counted`: the daemon's own count of applied tells (e.g. `status` or the recovered
    state's `tells`), checked against the history when given. `complete`: the client got a
    reply to every tell it sent, so every recorded measurement must be an acknowledged one.
    """
    plant = plant_dir.name
    history = recorded_history(plant_dir)
    steps = [e["t"] for e in history]
    assert steps == list(range(1, len(history) + 1)), f"steps lost or duplicated: {steps}"
    pids = [e["proposal_id"] for e in history]
    assert len(set(pids)) == len(pids), "a proposal id recorded at two steps"
    if tells_counted is not None:
        assert tells_counted == len(history), (tells_counted, len(history))
    by_pid = {e["proposal_id"]: e for e in history}
    acked = [a for a in acknowledged_tells(log) if a["plant"] == plant]
    for a in acked:
        got = by_pid.get(a["proposal_id"])
        assert got is not None, f"acknowledged tell {a} is missing from the history"
        assert (got["t"], got["measurement"]) == (a["t"], a["measurement"]), (a, got)
    if complete:
        extra = sorted(set(by_pid) - {a["proposal_id"] for a in acked})
        assert not extra, f"measurements recorded that were never acknowledged: {extra}"
    new = [a["t"] for a in acked if not a["duplicate"]]
    assert all(b > a for a, b in zip(new, new[1:])), f"acknowledged steps not monotonic: {new}"
    _check_asks(log, plant, {a["proposal_id"]: a["t"] for a in acked})
    return {"requests": sum(e["op"] == "request" for e in log), "acknowledged_tells": len(acked),
            "history": len(history)}


def _check_asks(log: list[dict], plant: str, told_at: dict[str, int]) -> None:
    """Each proposal's step is the step its tell was acknowledged at, and once a step is told
    no later ask is answered with that step or an earlier one."""
    requests = {e["id"]: e for e in log if e["op"] == "request"}
    last_told = 0
    for e in log:
        if e["op"] != "reply" or requests[e["id"]].get("plant") != plant:
            continue
        kind, reply = requests[e["id"]]["type"], e["reply"]
        if kind == "ask":
            assert reply["t"] > last_told, f"ask answered with step {reply['t']} after {last_told} was told"
            pid = reply["proposal_id"]
            assert told_at.get(pid, reply["t"]) == reply["t"], (pid, reply["t"], told_at[pid])
        elif kind == "tell":
            last_told = max(last_told, reply["t"])
