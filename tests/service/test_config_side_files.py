"""A matrix kernel's matrix may live in a side file (CSV or .npy, relative to the plant file): it is
read and validated at load as the inline form is, gives the same optimizer mapping and
fingerprint, and every mistake names the plant file, the key and the side file."""

from pathlib import Path

import numpy as np
import pytest

from tvbod.service.config import ConfigError, load_daemon_config, load_plant_config
from tvbod.service.reload import ReloadRefused, plan_reload

ENV = {"HOME": "/home/op", "XDG_RUNTIME_DIR": "/run/user/1000"}
ARMS = """\
name: arms
parameters:
  - {{name: arm, arms: {arms}}}
sense: maximize
optimizer:
  kernel:
    type: matrix
    matrix: {matrix}
"""
K3 = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.3], [0.2, 0.3, 1.0]])


def plant(tmp_path: Path, matrix: str, arms: int = 3) -> Path:
    path = tmp_path / "plants" / "arms.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ARMS.format(arms=arms, matrix=matrix))
    return path


def csv(path: Path, K: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, K, delimiter=",", fmt="%.17g")


def error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_plant_config(path)
    assert info.value.file == path and info.value.key == "optimizer.kernel.matrix"
    assert str(info.value).startswith(f"{path}: optimizer.kernel.matrix: ")
    return info.value


@pytest.mark.parametrize("name", ["K.npy", "K.csv", "data/K.csv"])
def test_a_side_file_gives_the_inline_matrix_mapping_and_fingerprint(tmp_path, name):
    side = tmp_path / "plants" / name
    if name.endswith(".npy"):
        side.parent.mkdir(parents=True, exist_ok=True)
        np.save(side, K3)
    else:
        csv(side, K3)
    from_file = load_plant_config(plant(tmp_path, name))
    inline = load_plant_config(plant(tmp_path / "inline", str(K3.tolist())))
    assert from_file.optimizer_mapping == inline.optimizer_mapping
    assert from_file.fingerprint == inline.fingerprint
    assert np.array_equal(np.array(from_file.optimizer.kernel.matrix), K3)


def test_the_path_is_relative_to_the_plant_file_not_the_working_directory(tmp_path, monkeypatch):
    csv(tmp_path / "plants" / "K.csv", K3)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_plant_config(plant(tmp_path, "K.csv")).optimizer.kernel.matrix[0][1] == 0.5


def test_a_missing_side_file_names_it(tmp_path):
    e = error(plant(tmp_path, "nope.npy"))
    assert f"cannot read {tmp_path / 'plants' / 'nope.npy'}" in e.problem


def test_a_csv_that_is_not_numbers_names_the_file(tmp_path):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "K.csv").write_text("a,b,c\n1,2,3\n4,5,6\n")
    assert "K.csv is not a CSV of numbers" in error(plant(tmp_path, "K.csv")).problem


def test_a_ragged_csv_is_refused(tmp_path):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "K.csv").write_text("1,0.5,0.2\n0.5,1\n0.2,0.3,1\n")
    assert "K.csv is not a CSV of numbers" in error(plant(tmp_path, "K.csv")).problem


def test_a_file_that_is_not_npy_is_refused(tmp_path):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "K.npy").write_bytes(b"\x93NUMPY garbage, not an array header")
    assert "K.npy is not an .npy array of numbers" in error(plant(tmp_path, "K.npy")).problem


def test_a_pickled_npy_is_never_unpickled(tmp_path):
    (tmp_path / "plants").mkdir()
    np.save(tmp_path / "plants" / "K.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "is not an .npy array of numbers" in error(plant(tmp_path, "K.npy")).problem


@pytest.mark.parametrize("array, words", [
    (np.ones(3), "1-D float64 array of shape (3,)"),
    (np.ones((3, 3, 1)), "3-D float64 array"),
    (np.array([[True, False], [False, True]]), None),  # booleans are numbers: a shape error next
    (np.array([["a", "b"], ["c", "d"]]), "a matrix kernel needs"),
])
def test_an_npy_of_the_wrong_kind_names_what_it_holds(tmp_path, array, words):
    (tmp_path / "plants").mkdir()
    np.save(tmp_path / "plants" / "K.npy", array)
    e = error(plant(tmp_path, "K.npy"))
    assert words is None or words in e.problem


def test_a_wrong_shape_names_the_side_file_and_the_allowed_shape(tmp_path):
    csv(tmp_path / "plants" / "K.csv", np.eye(2))
    e = error(plant(tmp_path, "K.csv"))
    assert e.problem.startswith(f"{tmp_path / 'plants' / 'K.csv'} has shape (2, 2)")
    assert "(3, 3)" in str(e)


@pytest.mark.parametrize("K, words", [
    (np.array([[1.0, 0.5, 0.0], [0.4, 1.0, 0.0], [0.0, 0.0, 1.0]]), "is not symmetric"),
    (np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), "is not positive semi-definite"),
])
def test_symmetry_and_psd_are_checked_as_inline(tmp_path, K, words):
    csv(tmp_path / "plants" / "K.csv", K)
    e = error(plant(tmp_path, "K.csv"))
    assert e.problem.startswith(f"{tmp_path / 'plants' / 'K.csv'} {words}")
    inline = error(plant(tmp_path / "inline", str(K.tolist())))
    assert inline.problem.startswith(words)  # the same check, without a file to name


def test_a_non_finite_value_is_refused(tmp_path):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "K.csv").write_text("1,0.5,0.2\n0.5,nan,0.3\n0.2,0.3,1\n")
    assert "not finite" in error(plant(tmp_path, "K.csv")).problem


def test_another_suffix_is_refused_with_the_allowed_forms(tmp_path):
    e = error(plant(tmp_path, "K.txt"))
    assert "must end in .csv or .npy" in e.problem and "FILE.npy" in e.allowed


def test_a_changed_side_file_changes_the_fingerprint_and_a_reload_sees_it(tmp_path):
    """As for an inline matrix: the change is detected, and refused live (the kernel is frozen
    while the plant keeps its data), never silently ignored."""
    (tmp_path / "tvbod.yaml").write_text("plants: plants/*.yaml\n")
    plant(tmp_path, "K.npy")
    np.save(tmp_path / "plants" / "K.npy", K3)
    before = load_daemon_config(tmp_path / "tvbod.yaml", env=ENV)
    K = K3.copy()
    K[0, 1] = K[1, 0] = 0.6
    np.save(tmp_path / "plants" / "K.npy", K)
    after = load_daemon_config(tmp_path / "tvbod.yaml", env=ENV)
    assert after.plant("arms").fingerprint != before.plant("arms").fingerprint
    with pytest.raises(ReloadRefused, match="optimizer.kernel.matrix cannot change"):
        plan_reload(before, after)
