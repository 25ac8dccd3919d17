"""`measurement: auto`: the output map calibrated from the first measurements, frozen after them,
re-centred at a reset; trajectories independent of the plant's units; state round trips."""

import numpy as np
import pytest

from tvbod.core import SpecError, StateError, make_strategy, parse_spec
from tvbod.core.calibration import OutputMap


def _spec(measurement="auto", strategy="et-gp-ucb", **extra):
    return {"strategy": strategy, "sense": "minimize", "seed": 3,
            "domain": {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 1.0]},
            "kernel": {"type": "se", "lengthscales": 0.3}, "noise_variance": 0.02,
            "measurement": measurement, "budget": {"candidates": 128, "starts": 2, "maxiter": 10},
            **extra}


def _cost(x, t, jump_at=30):
    """A smooth cost in arbitrary units whose level and shape change at `jump_at`."""
    x = np.asarray(x)
    base = 40.0 + 3.0 * np.sum((x - 0.3) ** 2) + np.sin(5 * x[0])
    return base + (6.0 + 4.0 * x[1] if t >= jump_at else 0.0)


def _run(spec, units=1.0, shift=0.0, steps=45, noise_seed=7):
    s = make_strategy(spec)
    rng = np.random.default_rng(noise_seed)
    asks, results = [], []
    for t in range(1, steps + 1):
        x = s.ask()
        y = units * (_cost(x, t) + 0.05 * rng.standard_normal()) + shift
        asks.append(x.copy())
        results.append(s.tell(x, y))
    return s, np.array(asks), results


# ---------------------------------------------------------------------- the map itself
def test_the_auto_map_is_the_mean_and_std_of_the_calibration_measurements_then_frozen():
    m = OutputMap(None, None, sign=-1.0, n0=4)
    ys = [10.0, 12.0, 11.0, 15.0]
    for i, y in enumerate(ys, 1):
        assert m.calibrating
        m.observe(y)
        assert m.offset_ == pytest.approx(np.mean(ys[:i]), rel=1e-15)
        if i >= 2:
            assert m.scale_ == pytest.approx(np.std(ys[:i]), rel=1e-15)
    assert not m.calibrating
    assert m.observe(100.0) is False and m.scale_ == pytest.approx(np.std(ys))
    assert m.to_internal(12.0) == pytest.approx(-(12.0 - 12.0) / np.std(ys))
    assert m.to_measurement(m.to_internal(13.7)) == pytest.approx(13.7, rel=1e-14)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_pessimism_puts_the_auto_offset_that_many_scales_on_the_worse_side(sign):
    # maximizing (sign 1) the worse side is below the mean; minimizing (-1), above it
    ys = [10.0, 12.0, 11.0, 15.0]
    m = OutputMap(None, None, sign=sign, n0=4, pessimism=1.5)
    m.observe(ys[0])
    assert m.offset_ == ys[0]  # one measurement: no scale yet, so no margin
    for y in ys[1:]:
        m.observe(y)
    assert m.offset_ == pytest.approx(np.mean(ys) - sign * 1.5 * np.std(ys), rel=1e-15)
    assert m.to_internal(np.mean(ys)) == pytest.approx(1.5, rel=1e-12)  # the data sit above
    assert m.recentre(20.0) and m.offset_ == pytest.approx(20.0 - sign * 1.5 * np.std(ys))
    fixed = OutputMap(None, 2.0, sign=sign, n0=4, pessimism=1.5)  # a fixed scale sets the margin
    fixed.observe(10.0)
    assert fixed.offset_ == 10.0 - sign * 3.0


def test_the_internal_values_do_not_depend_on_the_units():
    ys = np.array([3.1, 2.7, 4.4, 3.9, 3.3, 2.2])
    for x, c in ((0.5, 0.0), (0.7, 5.0), (2.1, -40.0), (1000.0, 1e4)):
        a, b = OutputMap(None, None, 1.0, 6), OutputMap(None, None, 1.0, 6)
        for y in ys:
            a.observe(y)
            b.observe(x * y + c)
        assert b.to_internal(x * 3.5 + c) == pytest.approx(a.to_internal(3.5), abs=1e-9)


def test_identical_measurements_keep_the_previous_scale():
    m = OutputMap(None, None, 1.0, 5)
    for y in (2.0, 2.0, 2.0):
        m.observe(y)
    assert m.scale_ == 1.0 and m.offset_ == 2.0


def test_a_fixed_part_stays_fixed_and_a_fixed_map_never_calibrates():
    m = OutputMap(16.0, None, 1.0, 3)
    for y in (14.0, 18.0, 16.0):
        m.observe(y)
    assert m.offset_ == 16.0 and m.scale_ == pytest.approx(np.std([14.0, 18.0, 16.0]))
    fixed = OutputMap(16.0, 2.0, 1.0, 3)
    assert not fixed.calibrating and fixed.observe(1.0) is False and fixed.recentre(1.0) is False


# ---------------------------------------------------------------------- the strategy
def test_trajectories_are_bit_identical_when_the_units_change_by_a_power_of_two():
    # x 4 is exact in binary floating point: every internal value, hence every ask, is the same.
    s1, a1, r1 = _run(_spec(), units=1.0)
    s4, a4, r4 = _run(_spec(), units=4.0)
    assert np.array_equal(a1, a4)
    assert [r.reset for r in r1] == [r.reset for r in r4]
    assert s4.output.scale_ == 4.0 * s1.output.scale_


def test_a_fixed_map_changes_the_trajectory_when_the_units_change():
    # the control for the test above: with a fixed map the same plant in other units is another
    # problem (this is what `auto` removes)
    fixed = {"offset": 40.0, "scale": 1.0}
    _, a1, _ = _run(_spec(fixed), units=1.0)
    _, a4, _ = _run(_spec(fixed), units=4.0)
    assert not np.array_equal(a1, a4)


def test_the_trigger_waits_for_the_calibration_and_then_catches_the_jump():
    s, _, results = _run(_spec(), steps=40)
    n0 = s.spec.n_calibration
    assert n0 == 20  # max(20, 2d + 2)
    assert not any(r.reset for r in results[:n0])
    assert not s.output.calibrating
    resets = [r.t for r in results if r.reset]
    assert resets and 30 <= resets[0] <= 33, resets


def test_a_reset_recentres_the_offset_on_the_reset_measurement_and_keeps_the_scale():
    s = make_strategy(_spec())
    rng = np.random.default_rng(0)
    for t in range(1, 30):
        x = s.ask()
        s.tell(x, _cost(x, t) + 0.05 * rng.standard_normal())
    scale = s.output.scale_
    for t in range(30, 45):
        x = s.ask()
        y = _cost(x, t) + 0.05 * rng.standard_normal()
        if s.tell(x, y).reset:  # the offset one scale to the worse (higher-cost) side of y
            assert s.output.offset_ == y + scale and s.output.scale_ == scale
            assert s.dataset_size == 1 and s.gp.y_[0] == pytest.approx(1.0, rel=1e-12)
            mean, _ = s.predict(x)
            assert mean == pytest.approx(y, abs=0.1)
            return
    pytest.fail("no reset after the jump")


def test_a_calibration_state_round_trip_continues_the_same_trajectory():
    spec = _spec()
    _, full, _ = _run(spec, steps=20)
    s = make_strategy(spec)
    rng = np.random.default_rng(7)
    asks = []
    for t in range(1, 21):
        if t == 9:  # in the middle of the calibration
            state = s.state_dict()
            s = make_strategy(spec)
            s.load_state_dict(state)
        x = s.ask()
        asks.append(x.copy())
        s.tell(x, _cost(x, t) + 0.05 * rng.standard_normal())
    assert np.array_equal(np.array(asks), full)


def test_a_state_written_under_a_fixed_map_is_refused_by_an_auto_spec_and_back():
    fixed = make_strategy(_spec({"offset": 40.0, "scale": 1.0}))
    x = fixed.ask()
    fixed.tell(x, 41.0)
    auto = make_strategy(_spec())
    with pytest.raises(StateError, match="measurement map"):
        auto.load_state_dict(fixed.state_dict())
    with pytest.raises(StateError, match="measurement map"):
        fixed.load_state_dict(auto.state_dict())


def test_predictions_and_the_dataset_are_in_measurement_units():
    s, _, _ = _run(_spec(), units=1000.0, shift=7.0, steps=12)
    X, y, _ = s.dataset()
    mean, std = s.predict(X[-1])
    assert mean == pytest.approx(y[-1], abs=5 * 1000 * 0.05 + 3 * std)
    assert y.min() > 1000 * 39  # told values, not internal ones


# ---------------------------------------------------------------------- the spec
def test_measurement_auto_parses_and_bad_values_name_the_key():
    spec = parse_spec(_spec("auto"))
    assert spec.calibrates and spec.measurement_offset is None and spec.n_calibration == 20
    spec = parse_spec(_spec({"scale": "auto", "offset": 3.0, "calibration_points": 12}))
    assert spec.measurement_offset == 3.0 and spec.n_calibration == 12
    assert not parse_spec(_spec({"offset": 1.0, "scale": 2.0})).calibrates
    with pytest.raises(SpecError, match="measurement.calibration_points"):
        parse_spec(_spec({"offset": 1.0, "scale": 2.0, "calibration_points": 5}))
    with pytest.raises(SpecError, match="measurement.calibration_points"):
        parse_spec(_spec({"scale": "auto", "calibration_points": 1}))
    with pytest.raises(SpecError, match="measurement.scale"):
        parse_spec(_spec({"scale": "automatic"}))
    with pytest.raises(SpecError, match="measurement"):
        parse_spec(_spec("standardize"))
    assert parse_spec(_spec("auto")).pessimism == 1.0
    assert parse_spec(_spec("auto"), {"measurement.pessimism": 0}).pessimism == 0.0
    for bad in (-1, 11):
        with pytest.raises(SpecError, match="measurement.pessimism"):
            parse_spec(_spec("auto"), {"measurement.pessimism": bad})
    with pytest.raises(SpecError, match="fixed by the behaviour version") as err:
        parse_spec(_spec({"offset": "auto", "pessimism": 1}))
    assert err.value.key == "measurement.pessimism"


def test_a_stored_auto_offset_without_pessimism_replays_with_the_plain_mean():
    from tvbod.core.behaviours import read_stored, spelled

    for meas in ("auto", {"offset": "auto", "scale": 2.0}):
        old = read_stored(_spec(meas))
        assert spelled(old)["measurement"]["pessimism"] == 0.0
        assert parse_spec(old).pessimism == 0.0
        assert spelled(_spec(meas))["measurement"]["pessimism"] == 1.0
    today = spelled(_spec("auto"))  # as the code before behaviour versions stored it
    assert spelled(read_stored(today)) == today
    assert read_stored(today)["measurement"] == {"offset": "auto", "scale": "auto"}
    assert spelled(read_stored(_spec("auto")))["measurement"]["relevel"] is False
    assert spelled(_spec("auto"))["measurement"]["relevel"] is True
    assert spelled(_spec({"offset": 1.0, "scale": 2.0}))["measurement"] == {
        "offset": 1.0, "scale": 2.0}
    odd = spelled(_spec("auto"))
    odd["measurement"]["pessimism"] = 0.5
    with pytest.raises(SpecError) as err:  # a value no behaviour version had
        read_stored(odd)
    assert err.value.key == "measurement.pessimism"


# ---------------------------------------------------------------------- absurd measurements
@pytest.mark.parametrize("value", [1.7976931348623157e308, -1.7976931348623157e308, 1e200])
@pytest.mark.parametrize("position", [2, 3, 10, 20])
def test_a_measurement_that_would_make_the_map_non_finite_is_refused_and_changes_nothing(
        value, position):
    from tvbod.core.errors import DomainError
    from tvbod.service.state_check import non_finite

    s = make_strategy(parse_spec(_spec()))
    for t in range(1, position):
        s.tell(s.ask(), _cost(s.ask(), t))
    x = s.ask()
    before = s.state_dict()
    with pytest.raises(DomainError, match="non-finite"):
        s.tell(x, value)
    assert s.state_dict() == before  # refused before any change
    s.tell(x, _cost(x, position))
    assert non_finite(s.state_dict(), "state", []) == []


def test_the_check_admits_what_keeps_the_map_finite_and_equals_the_estimate_it_makes():
    m = OutputMap(None, None, -1.0, 4, pessimism=1.0)
    for y in (5e-324, -0.0, 1e150, 3.0):
        m.check(y)
        m.observe(y)
    raw = np.asarray([5e-324, -0.0, 1e150, 3.0])
    assert m.scale_ == float(raw.std()) and m.offset_ == float(raw.mean()) + m.scale_


@pytest.mark.parametrize("relevel", [True, False])
def test_after_a_reset_the_offset_follows_the_new_datasets_mean_for_the_refractory_period(relevel):
    # `relevel`: during the hold after a reset (3 steps, in which no reset can come) the auto
    # offset is the mean of D's measurements plus one scale (a cost: the worse side). Without
    # it, the reset's one measurement sets it.
    s = make_strategy(parse_spec(_spec({"offset": "auto", "scale": "auto"}), {
        "measurement.relevel": relevel, "trigger.uninformed": "off", "trigger.backoff": 1}))
    rng = np.random.default_rng(0)
    for t in range(1, 61):
        x = s.ask()
        if s.tell(x, _cost(x, t) + rng.normal(0, 0.05)).reset and t >= 30:
            break
    first, hold = s.output.offset_, s.trigger.hold
    seen = [float(s.output.to_measurement(s.gp.y_[-1]))]
    for _ in range(hold):
        x = s.ask()
        seen.append(_cost(x, 60) + rng.normal(0, 0.05))
        assert not s.tell(x, seen[-1]).reset
    expected = np.mean(seen) + s.output.pessimism * s.output.scale_ if relevel else first
    assert s.output.offset_ == pytest.approx(expected, rel=1e-12)
    assert np.allclose(s.output.to_measurement(s.gp.y_), seen, rtol=1e-12)


def test_relevel_is_fixed_by_the_behaviour_version_and_a_boolean():
    with pytest.raises(SpecError, match="fixed by the behaviour version"):
        parse_spec(_spec({"offset": 1.0, "scale": "auto", "relevel": True}))
    with pytest.raises(SpecError, match="measurement.relevel"):
        parse_spec(_spec({"offset": "auto", "scale": "auto"}), {"measurement.relevel": "yes"})
