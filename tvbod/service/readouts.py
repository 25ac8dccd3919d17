"""What a plant reports without changing: its description (`hello`), the recommendation
(`best`, cached: the plant's job computes it with the next proposal), its counters and latencies
(`status`), and `slow_proposal` warnings. `PlantReadouts` reads the `PlantState` it is given
(tvbod/service/transition.py); `PlantRuntime` (tvbod/service/plant.py) owns both."""

from __future__ import annotations

from typing import Any

import numpy as np

from tvbod.core.recommend import recommend
from tvbod.protocol import Best, BestReply
from tvbod.service.events import PlantEventLog
from tvbod.service.transition import PlantState

#: Latency samples kept per request type for the status percentiles.
_LATENCY_WINDOW = 1000
_BEST_RULE = "posterior-mean maximizer over D"


class LatencyWindow:
    """The last `_LATENCY_WINDOW` service times of one request type, for p50/p99 in `status`.

    A float64 ring (allocated at the first sample), a fraction of a deque of Python floats'
    memory: two per plant. The percentiles do not depend on the samples' order."""

    def __init__(self) -> None:
        self._ring: np.ndarray | None = None
        self._count = 0  # samples ever added

    def add(self, seconds: float) -> None:
        if self._ring is None:
            self._ring = np.empty(_LATENCY_WINDOW)
        self._ring[self._count % _LATENCY_WINDOW] = seconds
        self._count += 1

    def percentiles(self) -> tuple[float | None, float | None]:
        if not self._count:
            return None, None
        kept = self._ring[: min(self._count, _LATENCY_WINDOW)]
        p50, p99 = np.percentile(kept, [50, 99])
        return round(float(p50) * 1e3, 3), round(float(p99) * 1e3, 3)


class PlantReadouts:
    """`describe`, `best` and `status` of a `PlantState`, with the latency windows and the
    cached recommendation they report."""

    def __init__(self, state: PlantState) -> None:
        self.state = state
        self.latency = {"ask": LatencyWindow(), "tell": LatencyWindow()}
        self.best_entry: tuple[tuple, dict | None] | None = None  # (key, `best` fields) cache

    def describe(self) -> dict[str, Any]:
        """The plant's description for `hello` and `status`."""
        st = self.state
        params = [{"name": p.name, "lower": p.lower, "upper": p.upper, "unit": p.unit,
                   **({"arms": p.arms} if p.arms else {})} for p in st.config.parameters]
        return {"plant": st.name, "parameters": params, "sense": st.config.sense,
                "t": st.strategy.t, "pending": st.proposal_fields()}

    def _best_key(self) -> tuple:
        st = self.state
        return (st.strategy.t, st.strategy.dataset_size, st.config.fingerprint)

    def entry(self, rec=False) -> tuple[tuple, dict | None]:
        """`(key, fields)` of the recommendation now (tvbod/core/recommend.py), or of `rec`, one
        a job computed from this strategy (`workers.run_job`)."""
        st = self.state
        rec = recommend(st.strategy) if rec is False else rec
        fields = None if rec is None else {
            "gains": st.config.gains(rec.x), "mean": rec.mean, "std": rec.std,
            "measured_at": rec.measured_at,
            **({"certified": rec.certified} if rec.certified is not None else {})}
        return self._best_key(), fields

    def best(self, req: Best | None = None, busy: bool = False) -> BestReply:
        """The recommendation now, cached until the next tell (a job computes it with the next
        proposal). `busy`: a job runs on this plant, so the newest recommendation computed is
        reported without touching the strategy (`status` across all plants)."""
        st = self.state
        if not busy and (self.best_entry is None or self.best_entry[0] != self._best_key()):
            self.best_entry = self.entry()
        fields = (self.best_entry or (None, None))[1]
        return BestReply(None if req is None else req.request_id, plant=st.name,
                         t=st.strategy.t, dataset_size=st.strategy.dataset_size,
                         sense=st.config.sense, rule=_BEST_RULE, **(fields or {}))

    def _safety_status(self, with_fraction: bool) -> dict[str, Any]:
        """`safety`: the threshold, violations and failures, and (`with_fraction`, a status
        request on an idle plant) the share of the box certified safe now."""
        strategy = self.state.strategy
        safety = strategy.spec.safety
        if safety is None:
            return {}
        s = strategy.safety
        return {"safety": {"threshold": safety.threshold, "violations": s.violations,
                           "failures": s.failures,
                           "safe_fraction": strategy.safe_fraction() if with_fraction
                           else None}}

    def status(self, adapter: str | None, with_best: bool = False,
               busy: bool = False) -> dict[str, Any]:
        """Counters and latencies; `adapter`: the adapter driving the plant; `with_best` adds
        `best` (the `status` request; not the once-a-second STATUS= line, for which a posterior
        per plant would cost too much); `busy`: see `best`."""
        ask50, ask99 = self.latency["ask"].percentiles()
        tell50, tell99 = self.latency["tell"].percentiles()
        st, s = self.state, self.state.strategy
        return {
            "plant": st.name, "strategy": s.name, "t": s.t, "dataset_size": s.dataset_size,
            "resets": s.resets, "last_reset_t": s.last_reset_t, "tells": st.tells,
            "failed_tells": st.failed_tells, "pending": st.proposal_fields(),
            "prepared": bool(st.proposal is None and s.proposal_ready and not busy),
            "adapter": adapter,
            **({"best": self.best(busy=busy).body()} if with_best else {}),
            **self._safety_status(with_best and not busy),
            "latency": {"ask_p50_ms": ask50, "ask_p99_ms": ask99,
                        "tell_p50_ms": tell50, "tell_p99_ms": tell99},
        }


class ProposalBudget:
    """`slow_proposal` when computing a step's proposal took longer than the daemon file's
    `ask_time_budget_ms` (in an ask, a job or the loop's idle time alike); not for the first
    step whose work is timed after a start (a restored plant may settle, then propose, for it),
    whose one-off costs (imports, caches, a restored state's first factorization) say nothing of
    the budget."""

    def __init__(self, events: PlantEventLog, budget_ms: float) -> None:
        self.events, self.budget_ms = events, budget_ms
        self.first_timed_step: int | None = None

    def check(self, t: int, seconds: float) -> None:
        ms = seconds * 1e3
        if self.first_timed_step is None:
            self.first_timed_step = t
        if ms > self.budget_ms and t != self.first_timed_step:
            self.events.emit("slow_proposal", level="warning", t=t, ms=round(ms, 1),
                             budget_ms=self.budget_ms)
