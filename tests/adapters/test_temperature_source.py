"""Temperature data: shipped split, standardization, kernel, stream regret, raw Intel reader."""

import runpy
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from plant_adapters.temperature.source import (
    TemperatureStream, bin_means, load_split, read_raw, resample, split_days, standardize,
)
from tvbod.core.kernels import empirical_covariance as empirical_kernel

FIXTURES = Path(__file__).parent / "fixtures"
RAW = FIXTURES / "intel_raw_small.txt"


@pytest.fixture(scope="module")
def split():
    return load_split()


@pytest.fixture(scope="module")
def raw():
    return read_raw(RAW)


# ---------------------------------------------------------------------- shipped split
def test_shipped_split_has_50_sensors_3_train_and_2_test_days(split):
    train, test = split
    assert train.shape == (50, 144) and test.shape == (50, 96)


def test_standardization_uses_training_mean_and_std_over_all_values(split):
    train, test = split
    train_z, test_z, m, s = standardize(train, test)
    assert train_z.mean() == pytest.approx(0.0, abs=1e-12)
    assert train_z.std() == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(test_z, (test - m) / s)


def test_empirical_kernel_is_symmetric_positive_definite(split):
    # found: full rank, eigenvalues 8.1e-5 .. 40.3 (condition number ~5e5); nothing is added
    K = empirical_kernel(standardize(*split)[0])
    assert K.shape == (50, 50)
    np.testing.assert_array_equal(K, K.T)
    assert np.linalg.eigvalsh(K).min() > 5e-5


def test_empirical_kernel_agrees_with_service_config(split):
    from tvbod.service.config import load_plant_config  # the test may import the service
    K = empirical_kernel(standardize(*split)[0])
    # the daemon's kernel: what a plant file's `empirical_from: temperature_train.csv` becomes
    shipped = Path(__file__).resolve().parents[2] / "configs" / "plants" / "temperature.yaml"
    daemon_K = np.array(load_plant_config(shipped).optimizer.kernel.matrix)
    np.testing.assert_allclose(K, daemon_K, rtol=0, atol=1e-11)


# ---------------------------------------------------------------------- stream
def test_regret_is_zero_at_the_best_arm_and_nonnegative_elsewhere():
    stream = TemperatureStream.from_data()
    assert len(stream) == 96 and stream.arms == 50
    for t in range(1, 97):
        assert stream.regret(stream.best_arm(t), t) == 0.0
        assert stream.value(stream.best_arm(t), t) == stream.best(t)
        assert min(stream.regret(a, t) for a in range(50)) >= 0.0


def test_stream_steps_are_one_based_test_columns(split):
    _, test_z, _, _ = standardize(*split)
    stream = TemperatureStream(test_z)
    steps = list(stream)
    assert [s.t for s in steps] == list(range(1, 97))
    np.testing.assert_array_equal(steps[0].values, test_z[:, 0])
    assert stream.value(7, 96) == test_z[7, 95]
    for t in (0, 97):
        with pytest.raises(IndexError):
            stream.values(t)


def test_hottest_sensor_changes_during_the_test_days():
    # the time variation the event trigger must detect
    stream = TemperatureStream.from_data()
    assert len({stream.best_arm(t) for t in range(1, 97)}) > 3


# ---------------------------------------------------------------------- raw Intel Lab format
def test_fixture_is_what_its_generator_writes():
    render = runpy.run_path(str(FIXTURES / "make_intel_raw.py"))["render"]
    assert render() == RAW.read_text(encoding="utf-8")


def test_raw_parser_counts_malformed_lines_and_implausible_temperatures(raw):
    assert raw.lines == 1321
    assert raw.skipped == 5                  # the generator's MALFORMED lines
    assert raw.implausible == 88 + 1         # dying mote 3 at 122.153 C, one -12.5 C on mote 5
    assert len(raw.times) == len(raw.motes) == len(raw.temperature) == 1321 - 5 - 89
    assert raw.temperature.min() >= -10 and raw.temperature.max() <= 60


def test_resample_drops_the_dying_and_the_sparse_mote(raw):
    ids, _, means = bin_means(raw)
    coverage = dict(zip(ids.tolist(), (~np.isnan(means)).mean(axis=1)))
    assert coverage[3] == pytest.approx(100 / 144) and coverage[4] == pytest.approx(24 / 144)
    kept, times, matrix = resample(raw)
    assert kept.tolist() == [1, 2, 5]
    assert matrix.shape == (3, 144) and np.isfinite(matrix).all()
    assert times[0] == np.datetime64("2004-03-01T00:00")
    assert (np.diff(times) == np.timedelta64(10, "m")).all()


def test_resampled_bin_is_the_mean_of_its_readings(raw):
    _, _, matrix = resample(raw)
    # mote 1, bin 7 (01:10-01:20): readings 18.7538 and 18.6174 in the fixture
    assert matrix[0, 7] == pytest.approx((18.7538 + 18.6174) / 2, abs=1e-12)
    # mote 5, bin 30 (05:00-05:10): 21.9243, -12.5 (dropped as implausible), 21.8507
    assert matrix[2, 30] == pytest.approx((21.9243 + 21.8507) / 2, abs=1e-12)


def test_small_gap_is_filled_by_linear_interpolation(raw):
    _, _, matrix = resample(raw)
    # mote 2: bins 50, 51 empty; bin 49 = mean(22.0713, 21.9922), bin 52 = mean(22.0273, 22.3824)
    v49, v52 = (22.0713 + 21.9922) / 2, (22.0273 + 22.3824) / 2
    np.testing.assert_allclose(matrix[1, 49:53], [v49, v49 + (v52 - v49) / 3,
                                                  v49 + 2 * (v52 - v49) / 3, v52], atol=1e-12)


def test_max_gap_and_min_coverage_control_which_motes_are_kept(raw):
    assert resample(raw, max_gap=1)[0].tolist() == [1, 5]          # mote 2 has a 2-bin gap
    ids, _, matrix = resample(raw, min_coverage=0.6)
    assert ids.tolist() == [1, 2, 3, 5]
    np.testing.assert_array_equal(matrix[2, 100:], matrix[2, 99])  # dead tail holds last value
    with pytest.raises(ValueError, match="min_coverage"):
        resample(raw, min_coverage=1.01)


def test_resample_to_30_minutes_in_an_explicit_window(raw):
    start, end = datetime(2004, 3, 1, 6), datetime(2004, 3, 1, 12)
    ids, times, matrix = resample(raw, 30, start=start, end=end)
    assert matrix.shape == (len(ids), 12)
    assert times[-1] == np.datetime64("2004-03-01T11:30")
    _, _, fine = bin_means(raw, 10, start=datetime(2004, 3, 1, 6), end=datetime(2004, 3, 1, 6, 30))
    assert matrix[0, 0] == pytest.approx(fine[0].mean())   # mote 1: 2 readings in each 10-min bin


def test_split_days_cuts_whole_days_from_the_first_bin():
    times = np.datetime64("2004-03-01T00:00") + np.timedelta64(10, "m") * np.arange(5 * 144)
    matrix = np.arange(5 * 144)[None, :] * np.ones((4, 1))
    train, test = split_days(matrix, times)
    assert train.shape == (4, 432) and test.shape == (4, 288)
    assert test[0, 0] == 432
    with pytest.raises(ValueError, match="longer window"):
        split_days(matrix[:, :700], times[:700])


def test_source_imports_no_service_module():
    code = ("import sys, plant_adapters.temperature.source\n"
            "print(','.join(m for m in ('tvbod', 'zmq', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
