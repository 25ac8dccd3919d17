"""The phases of the open-loop load run (mixed into `LoadGenerator`, tvbod/bench/daemon_load.py):
`hello`, `seed` (observations up to a dataset size), `prime` (every seeded plant's first, cold
refit), the timed `run_phase` and `finish`, each measured by `_measured` (wall time, both sides'
CPU, the daemon's CPU wait and memory, slot lag, dataset sizes)."""

from __future__ import annotations

import math
import resource
import time
from collections import Counter
from typing import Any, Callable

from tvbod.bench.daemon_proc import cpu_seconds, memory_mb, runqueue_seconds


def _generator_cpu() -> float:
    """This process's CPU seconds (user + system): the load generator's own cost."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class LoadPhases:
    """The run's phases over the generator's plants, recorder and event loop (`_serve`)."""

    def _progress_line(self, label: str, elapsed: float) -> str:
        counts = sum((c for (ph, _), c in self.rec.counts.items() if ph == self.phase), Counter())
        mem = memory_mb(self.daemon.pid)
        return (f"{label} {elapsed:.0f} s: {self.replies} replies, {counts['steps']} steps, "
                f"{counts['observed']} observed, {counts['missed_slots']} missed slots, "
                f"daemon RSS {mem['rss_mb']:.0f} MB")

    def _measured(self, fn: Callable[[], str | None]) -> dict[str, Any]:
        """Run `fn` (a phase), returning its wall time, CPU of both sides, memory, and reason."""
        pid = self.daemon.pid
        t0, d0, g0, q0 = time.perf_counter(), cpu_seconds(pid), _generator_cpu(), \
            runqueue_seconds(pid)
        reason = fn()
        wall = time.perf_counter() - t0
        d1, g1, q1 = cpu_seconds(pid), _generator_cpu(), runqueue_seconds(pid)
        sizes: dict[str, list[int]] = {}
        for p in self.plants:
            sizes.setdefault(p.spec.group, []).append(p.dataset_size)
        lag = sorted(self.lag.get(self.phase, []))
        lag_ms = {"slot_lag_p50_ms": lag[len(lag) // 2] * 1e3 if lag else None,
                  "slot_lag_p99_ms": lag[int(0.99 * (len(lag) - 1))] * 1e3 if lag else None}
        return {"phase": self.phase, "complete": reason is None, "reason": reason, **lag_ms,
                "seconds": wall, "daemon_cpu_s": d1 - d0, "daemon_cpu_pct": 100 * (d1 - d0) / wall,
                "generator_cpu_pct": 100 * (g1 - g0) / wall,
                "daemon_cpu_wait_s": q1 - q0, **memory_mb(pid),
                "dataset_size": {g: [min(v), max(v)] for g, v in sizes.items()}}

    def hello(self, timeout_s: float) -> str | None:
        """A `hello` to every plant (parameters -> simulated plants); the reason if not all came."""
        self.phase = "hello"
        self.replies = 0
        for p in self.plants:
            self._send(p, "hello", "hello")
        reason = self._serve(time.perf_counter() + timeout_s,
                             lambda: all(p.sim is not None for p in self.plants), "hello")
        missing = [p.spec.name for p in self.plants if p.sim is None]
        return reason or (f"no hello reply from {len(missing)} plant(s) within {timeout_s:g} s"
                          if missing else None)

    def seed(self, timeout_s: float) -> dict[str, Any]:
        """Observe random gains until every plant holds `seed_n` observations (or the deadline)."""
        self.phase, self.measure_from = "seed", -math.inf
        self.replies = 0
        todo = [p for p in self.plants if p.observed < p.spec.seed_n]
        for p in todo:
            self._observe(p)

        def phase() -> str | None:
            reason = self._serve(time.perf_counter() + timeout_s,
                                 lambda: all(p.observed >= p.spec.seed_n for p in todo), "seed")
            short = sum(p.observed < p.spec.seed_n for p in todo)
            return reason or (f"{short} plant(s) not seeded within {timeout_s:g} s"
                              if short else None)

        return self._measured(phase)

    def prime(self, timeout_s: float) -> dict[str, Any]:
        """One step (ask, then tell at once) of every seeded plant, all concurrently: their first
        refit on the seeded data starts cold, which the timed phases should not measure."""
        self.phase, self.measure_from = "prime", -math.inf
        self.replies = 0
        todo = [p for p in self.plants if p.spec.seed_n]
        goal = {p.index: p.steps + 1 for p in todo}
        for p in todo:
            self._ask(p, "ask_waiting")

        def phase() -> str | None:
            reason = self._serve(time.perf_counter() + timeout_s,
                                 lambda: all(p.steps >= goal[p.index] for p in todo), "prime")
            short = sum(p.steps < goal[p.index] for p in todo)
            return reason or (f"{short} plant(s) not stepped within {timeout_s:g} s"
                              if short else None)

        return self._measured(phase)

    def ask_all(self, timeout_s: float) -> dict[str, Any]:
        """An ask to every plant that holds no proposal, all at once; each is answered once the
        plant's job (the refit its last tell deferred, and the proposal) is done. Phase `ask`."""
        self.phase, self.measure_from = "ask", -math.inf
        self.replies = 0
        todo = [p for p in self.plants if p.proposal is None]
        for p in todo:
            self._ask(p, "ask_waiting")

        def phase() -> str | None:
            reason = self._serve(time.perf_counter() + timeout_s,
                                 lambda: all(p.inflight is None for p in todo), "ask")
            short = sum(p.proposal is None for p in todo)
            return reason or (f"{short} plant(s) without a proposal after {timeout_s:g} s"
                              if short else None)

        return self._measured(phase)

    def run_phase(self, name: str, groups: set[str], duration_s: float, warmup_s: float = 0.0,
                  deadline: float = math.inf) -> dict[str, Any]:
        """Step the plants of `groups` for `warmup_s + duration_s` (the warm-up not recorded);
        the other plants stop stepping. `deadline` (perf_counter) cuts the phase short."""
        start = time.perf_counter()
        self.phase, self.measure_from = name, start + warmup_s
        self.replies = 0
        for p in self.plants:
            was, p.active = p.active, p.spec.group in groups
            if p.active and not was:
                p.generation, p.ask_due = p.generation + 1, False
                self._push(start + (p.index * 0.618034 % 1.0) * p.period, p, "slot")
        end = start + warmup_s + duration_s

        def phase() -> str | None:
            reason = self._serve(min(end, deadline), lambda: False, name)
            if reason is None and deadline < end:
                reason = f"the run's deadline ended the phase after {deadline - start:.1f} s"
            return reason

        out = self._measured(phase)
        out["seconds"] = max(0.0, out["seconds"] - warmup_s)
        return out

    def finish(self, grace_s: float) -> dict[tuple[str, str], int]:
        """Stop stepping; wait up to `grace_s` for the replies still out. Returns the requests
        left unanswered, by (phase, group)."""
        for p in self.plants:
            p.active = False
        self._serve(time.perf_counter() + grace_s,
                    lambda: all(p.inflight is None for p in self.plants), "finish")
        left: Counter = Counter()
        for p in self.plants:
            if p.inflight is not None and p.inflight.record:
                left[(p.inflight.phase, p.spec.group)] += 1
        return dict(left)
