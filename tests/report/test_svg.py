"""The report's SVG charts: ticks, thinning and the elements a chart is made of."""

import math
import random
import xml.etree.ElementTree as ET

import pytest

from tvbod.report.svg import Marker, Series, chart, nice_ticks, thin


@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (-3.2, 17.9), (14.01, 14.03), (1e-4, 3e-4),
                                    (-50.0, -25.0), (0.0, 300.0)])
def test_ticks_cover_the_range_in_steps_of_one_two_or_five_times_a_power_of_ten(lo, hi):
    ticks = nice_ticks(lo, hi)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5, 10))
    assert ticks[0] >= lo - 1e-9 * step and ticks[-1] <= hi + 1e-9 * step
    assert ticks[0] - lo < step and hi - ticks[-1] < step
    assert 2 <= len(ticks) <= 11


def test_thinning_keeps_every_bucket_extreme_and_bounds_the_points():
    rng = random.Random(3)
    x = list(range(100_000))
    y = [rng.gauss(0, 1) for _ in x]
    y[54_321] = 40.0  # one spike must survive
    y[7] = float("nan")
    pts = thin(x, y, limit=1000)
    assert len(pts) <= 1000 and (54_321, 40.0) in pts
    assert min(b for _, b in pts) == min(v for v in y if not math.isnan(v))
    assert all(not math.isnan(b) for _, b in pts)
    assert thin([1, 2], [3.0, None]) == [(1, 3.0)]


def test_a_chart_is_valid_svg_with_its_series_markers_and_tooltips():
    svg = chart([Series("psi", [1, 2, 3], [0.1, 1.0, 10.0]),
                 Series("threshold", [1, 2, 3], [1.0, 1.0, 1.0], "line")],
                [Marker(2, "reset", "reset at t = 2"), Marker(3, "regime", "regime 0 -> 1")],
                title="point test", y_label="GP scale", log_y=True)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag in ("svg", ns + "svg")
    lines = [e for e in root.iter() if e.get("class") in ("reset-marker", "regime-marker")]
    assert [e.get("class") for e in lines] == ["reset-marker", "regime-marker"]
    assert [e[0].text for e in lines] == ["reset at t = 2", "regime 0 -> 1"]
    texts = [e.text for e in root.iter() if e.tag.endswith("text")]
    assert {"0.1", "1", "10"} <= set(texts)  # decades on a log axis
    assert "psi" in texts and "threshold" in texts and "reset" in texts


def test_a_chart_without_finite_data_says_so():
    svg = chart([Series("psi", [1, 2], [None, float("inf")])], title="empty", y_label="y")
    assert "no data" in svg
    ET.fromstring(svg)
