"""Checkpoints that fall due together are written one per turn, the most overdue first, spread in
time: plants stepping at one rate from one start would otherwise checkpoint back to back and hold
every reply up (tvbod/service/group_commit.py, docs/reliability.md, *The write path*)."""

import signal
import time
from datetime import datetime

from daemon_harness import Daemon, objective

from tvbod.service.group_commit import _CHECKPOINT_GAP_S

NAMES = [f"p{i}" for i in range(5)]


def _steps(client, n):
    for _ in range(n):
        p = client.ask()
        client.tell(p["proposal_id"], objective(p["gains"], p["t"]))


def _periodic(d, name):
    return [e for e in d.events(name) if e["event"] == "checkpoint_written"
            and e["reason"] == "periodic"]


def test_plants_due_together_checkpoint_one_at_a_time_most_overdue_first(tmp_path):
    d = Daemon(tmp_path, plants={n: {"seed": i + 1} for i, n in enumerate(NAMES)},
               checkpoint_every=1000).start()
    for k, name in enumerate(NAMES):  # p_k's journal: 2 (k + 1) records (a proposal, a tell)
        with d.client(name) as c:
            _steps(c, k + 1)
    assert not any(_periodic(d, n) for n in NAMES)
    # A live reload lowers checkpoint_every under every journal: all five fall due at once.
    config = tmp_path / "tvbod.yaml"
    config.write_text(config.read_text().replace("checkpoint_every: 1000", "checkpoint_every: 2"))
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(_periodic(d, n) for n in NAMES):
        time.sleep(0.05)
    assert d.stop() == 0
    written = sorted((datetime.fromisoformat(_periodic(d, n)[0]["timestamp"].replace("Z", "+00:00")),
                      n) for n in NAMES)
    assert [n for _, n in written] == NAMES[::-1]  # the longest journal first
    gaps = [(b - a).total_seconds() for (a, _), (b, _) in zip(written, written[1:])]
    # While two or more were due, consecutive checkpoints kept the gap (the last one, alone, is
    # written at once); the gap is a lower bound, whatever the machine's speed.
    assert all(g >= _CHECKPOINT_GAP_S - 1e-3 for g in gaps[:-1]), gaps
    d.start()  # every plant restarts from its checkpoint with its steps
    for k, name in enumerate(NAMES):
        with d.client(name) as c:
            assert c.status(name)["plants"][0]["tells"] == k + 1
    assert d.stop() == 0
