"""What a plant reports without changing: its description (`hello`), the recommendation
(`best`, cached: the plant's model job computes it with the next proposal) and its counters and
latencies (`status`). Mixed into `PlantRuntime` (tvbod/service/plant.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tvbod.core.recommend import recommend
from tvbod.protocol import Best, BestReply

#: Latency samples kept per request type for the status percentiles.
_LATENCY_WINDOW = 1000
_BEST_RULE = "posterior-mean maximizer over D"


class LatencyWindow:
    """The last `_LATENCY_WINDOW` service times of one request type, for p50/p99 in `status`.

    A float64 ring (8 KB when full, allocated at the first sample) rather than a deque of Python
    floats (~32 KB): two per plant. The percentiles do not depend on the samples' order."""

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
    """`describe`, `best`, `status` over the attributes `PlantRuntime` defines."""

    def describe(self) -> dict[str, Any]:
        """The plant's description for `hello` and `status`."""
        params = [{"name": p.name, "lower": p.lower, "upper": p.upper, "unit": p.unit,
                   **({"arms": p.arms} if p.arms else {})} for p in self.config.parameters]
        return {"plant": self.name, "parameters": params, "sense": self.config.sense,
                "t": self.strategy.t, "pending": self._proposal_fields()}

    def _proposal_fields(self) -> dict[str, Any] | None:
        if self.proposal is None:
            return None
        return {"proposal_id": self.proposal["id"], "gains": self.proposal["gains"],
                "t": self.proposal["t"]}

    def _best_key(self) -> tuple:
        return (self.strategy.t, self.strategy.dataset_size, self.config.fingerprint)

    def _best_entry(self, rec=False) -> tuple[tuple, dict | None]:
        """`(key, fields)` of the recommendation now (tvbod/core/recommend.py), or of `rec`, one
        a model job computed from this strategy (a process worker's, `workers.prepare_strategy`)."""
        rec = recommend(self.strategy) if rec is False else rec
        fields = None if rec is None else {
            "gains": self.config.gains(rec.x), "mean": rec.mean, "std": rec.std,
            "measured_at": rec.measured_at,
            **({"certified": rec.certified} if rec.certified is not None else {})}
        return self._best_key(), fields

    def best(self, req: Best | None = None, busy: bool = False) -> BestReply:
        """The recommendation now, cached until the next tell (a worker computes it with the
        next proposal). `busy`: a job runs on this plant, so the newest recommendation computed
        is reported without touching the strategy (`status` across all plants)."""
        if not busy and (self._best is None or self._best[0] != self._best_key()):
            self._best = self._best_entry()
        fields = (self._best or (None, None))[1]
        return BestReply(None if req is None else req.request_id, plant=self.name,
                         t=self.strategy.t, dataset_size=self.strategy.dataset_size,
                         sense=self.config.sense, rule=_BEST_RULE, **(fields or {}))

    def _safety_status(self, with_fraction: bool) -> dict[str, Any]:
        """`safety`: the threshold, violations and failures, and (`with_fraction`, a status
        request on an idle plant) the share of the box certified safe now."""
        safety = self.strategy.spec.safety
        if safety is None:
            return {}
        s = self.strategy.safety
        return {"safety": {"threshold": safety.threshold, "violations": s.violations,
                           "failures": s.failures,
                           "safe_fraction": self.strategy.safe_fraction() if with_fraction
                           else None}}

    def status(self, with_best: bool = False, busy: bool = False) -> dict[str, Any]:
        """Counters and latencies; `with_best` adds `best` (the `status` request; not the
        once-a-second STATUS= line, for which a posterior per plant would cost too much);
        `busy`: see `best`."""
        ask50, ask99 = self.latency["ask"].percentiles()
        tell50, tell99 = self.latency["tell"].percentiles()
        s = self.strategy
        return {
            "plant": self.name, "strategy": s.name, "t": s.t, "dataset_size": s.dataset_size,
            "resets": s.resets, "last_reset_t": s.last_reset_t, "tells": self.tells,
            "failed_tells": self.failed_tells, "pending": self._proposal_fields(),
            "prepared": bool(self.proposal is None and s.proposal_ready and not busy),
            "adapter": self.adapter,
            **({"best": self.best(busy=busy).body()} if with_best else {}),
            **self._safety_status(with_best and not busy),
            "latency": {"ask_p50_ms": ask50, "ask_p99_ms": ask99,
                        "tell_p50_ms": tell50, "tell_p99_ms": tell99},
        }
