"""The YAML reader: every file is parsed once, with libyaml's loader when PyYAML has it (the pure
loader otherwise), and both refuse a duplicate key naming the dotted key and both lines."""

from pathlib import Path

import pytest
import yaml

from tvbod.service.config import ConfigError, load_plant_config
from tvbod.service.config import common

ROOT = Path(__file__).resolve().parents[2]
LOADERS = [pytest.param(common._PURE_LOADER, id="pure")]
if hasattr(yaml, "CSafeLoader"):
    LOADERS.append(pytest.param(common._strict_loader(yaml.CSafeLoader), id="libyaml"))

NESTED_DUPLICATE = """\
name: a
parameters:
  - {name: x, lower: 0.0, upper: 1.0}
sense: maximize
optimizer:
  kernel:
    type: se
    lengthscales: 0.2
    lengthscales: 0.3
"""


@pytest.fixture(params=LOADERS)
def loader(request, monkeypatch):
    monkeypatch.setattr(common, "_LOADER", request.param)
    return request.param


def read(tmp_path: Path, text: str):
    path = tmp_path / "a.yaml"
    path.write_text(text)
    return path, common.read_yaml(path)


def test_libyaml_is_used_when_pyyaml_has_it():
    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("this PyYAML is built without libyaml")
    assert issubclass(common._LOADER, yaml.CSafeLoader)


def test_a_nested_duplicate_key_names_the_dotted_key_and_both_lines(tmp_path, loader):
    with pytest.raises(ConfigError) as info:
        read(tmp_path, NESTED_DUPLICATE)
    e = info.value
    assert (e.key, e.line) == ("optimizer.kernel.lengthscales", 9)
    assert str(e) == (f"{tmp_path / 'a.yaml'}:9: optimizer.kernel.lengthscales: "
                      "appears twice (lines 8 and 9)")


def test_a_duplicate_key_inside_a_list_item_names_its_index(tmp_path, loader):
    text = "parameters:\n  - {name: x, lower: 0}\n  - {name: y, lower: 0, lower: 1}\n"
    with pytest.raises(ConfigError) as info:
        read(tmp_path, text)
    assert (info.value.key, info.value.line) == ("parameters[1].lower", 3)


def test_merge_keys_and_anchors_are_not_duplicates(tmp_path, loader):
    text = ("base: &b {x: 1, y: 2}\n"
            "derived:\n  <<: *b\n  y: 3\n"
            "again: *b\n")
    _, data = read(tmp_path, text)
    assert data == {"base": {"x": 1, "y": 2}, "derived": {"x": 1, "y": 3}, "again": {"x": 1, "y": 2}}


def test_both_loaders_read_the_shipped_files_alike(loader):
    for name in ("tvbod.yaml", "plants/cartpole.yaml", "plants/temperature.yaml",
                 "adapters/cartpole.yaml"):
        path = ROOT / "configs" / name
        assert common.read_yaml(path) == yaml.safe_load(path.read_text()), name


def test_a_syntax_error_is_worded_as_the_pure_parser_words_it(tmp_path, loader):
    with pytest.raises(ConfigError) as info:
        read(tmp_path, "name: a\nsense: up: down\n")
    assert str(info.value) == f"{tmp_path / 'a.yaml'}:2: invalid YAML: mapping values are not allowed here"


def test_each_file_is_parsed_once(tmp_path, monkeypatch):
    """One loader instance per plant file: no second pass for the duplicate-key check."""
    made = []

    class Counting(common._LOADER):
        def __init__(self, stream):
            made.append(1)
            super().__init__(stream)

    monkeypatch.setattr(common, "_LOADER", Counting)
    load_plant_config(ROOT / "configs/plants/cartpole.yaml")
    assert len(made) == 1
