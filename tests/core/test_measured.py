"""`Strategy.measured`: what a tell would record, computed without changing anything, and the
value the tell then records (the one place a measurement meets the safety cap and the GP scale)."""

import copy

import numpy as np
import pytest

from tvbod.core import make_strategy

from test_safety import THRESHOLD, cost, mapping, run


def _plain(**extra) -> dict:
    m = mapping()
    del m["safety"]
    return {**m, **extra}


@pytest.mark.parametrize("m", [_plain(), mapping(), _plain(measurement="auto")],
                         ids=["plain", "safety", "auto-scale"])
def test_measured_is_what_the_tell_records_and_changes_nothing(m):
    s, _ = run(m, 30)
    x = s.ask()
    for y, failed in ((1.2, False), (1e4, False), (0.0, True)):
        if failed and s.safety is None:
            continue
        before = copy.deepcopy(s.state_dict())
        got = s.measured(y, failed)
        assert s.state_dict() == before  # nothing changed
        assert got.internal == pytest.approx(s.to_internal_y(got.told), rel=0, abs=0)
        assert got.violation == (s.safety is not None and (failed or y > THRESHOLD))
        assert got.capped == (s.safety is not None and (failed or got.told != y))
    m2 = s.measured(1e4)
    r = s.tell(x, 1e4)
    assert s.output.to_measurement(s.gp.y_[-1]) == pytest.approx(m2.told)
    assert r.safety_violation == m2.violation
    assert r.scaled == pytest.approx(float(s.gp.y_[-1]))


def test_a_capped_value_lies_one_safety_prior_sd_past_the_threshold_and_a_plain_one_is_kept():
    s, _ = run(mapping(), 30)
    capped = s.measured(1e4)
    assert THRESHOLD < capped.told < 1e4 and capped.capped and capped.violation
    kept = s.measured(1.2)
    assert kept.told == 1.2 and not kept.capped and not kept.violation
    plain = make_strategy(_plain())
    assert plain.measured(1e4).told == 1e4 and not plain.measured(1e4).capped


def test_the_tell_reports_the_measurement_on_the_gp_scale_it_left():
    s, results = run(_plain(measurement="auto"), 40)
    for (x, r) in results[-5:]:
        assert np.isfinite(r.scaled)
    x = s.ask()
    r = s.tell(x, cost(x, 41))
    assert r.scaled == pytest.approx(s.to_internal_y(cost(x, 41)), rel=1e-12)
