"""docs/configuration.md's optimizer reference documents only keys a user chooses: at most 45,
each one the plant-file loader accepts, none that a behaviour version fixes."""

import re
from pathlib import Path

import pytest
import yaml

from tvbod.core.behaviours import FIXED
from tvbod.service.config import ConfigError, load_plant_config

ROOT = Path(__file__).resolve().parents[2]
MOST = 45
#: A value no key accepts: each documented key must then be refused for its value, not as unknown.
PROBE = [[["probe"]]]
BOX = [{"name": "kp", "lower": 0.0, "upper": 1.0}, {"name": "ki", "lower": 0.0, "upper": 1.0}]
#: What a key needs around it to apply: (its parameters, the rest of the optimizer mapping).
CONTEXT = {
    "reset_period": (BOX, {"strategy": "r-gp-ucb"}),
    "forgetting": (BOX, {"strategy": "tv-gp-ucb"}),
    "drift_variance": (BOX, {"strategy": "ui-tvbo"}),
    "hyperparameters.": (BOX, {"hyperparameters": {"lengthscales": "map", "variance": "map",
                                                   "noise_variance": "map"}}),
    "acquisition.": (BOX, {"acquisition": {"type": "ei"}}),
    "kernel.matrix": ([{"name": "arm", "arms": 3}], {}),
    "kernel.empirical_from": ([{"name": "arm", "arms": 3}], {}),
}


def documented_keys() -> list[str]:
    """The keys of the tables (header `| key |`) in the section *The `optimizer:` mapping*."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("## The `optimizer:` mapping"):]
    section = section[:section.index("\n## ", 1)]
    keys, in_table = [], False
    for line in section.splitlines():
        if line.startswith("| key |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("| ---"):
            keys += re.findall(r"`([^`]+)`", line.split("|")[1])
    return keys


def test_the_optimizer_reference_documents_at_most_45_keys_and_none_twice():
    keys = documented_keys()
    assert len(keys) >= 30  # the tables were found
    assert len(keys) <= MOST, f"{len(keys)} documented optimizer keys: {keys}"
    assert len(set(keys)) == len(keys)
    assert not set(keys) & set(FIXED)


def _nested(key: str, value) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.mark.parametrize("key", documented_keys())
def test_each_documented_key_is_one_the_plant_file_loader_accepts(tmp_path, key):
    parameters, around = next((c for prefix, c in CONTEXT.items() if key == prefix or (
        prefix.endswith(".") and key.startswith(prefix) and key != "hyperparameters.lengthscales")),
        (BOX, {}))
    plant = {"name": "probe", "parameters": parameters, "sense": "minimize",
             "optimizer": _merge(around, _nested(key, PROBE))}
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(plant))
    with pytest.raises(ConfigError) as info:
        load_plant_config(path)
    e = info.value
    assert e.key == f"optimizer.{key}" or e.key.startswith(f"optimizer.{key}["), str(e)
    assert "unknown key" not in str(e) and "fixed by the behaviour version" not in str(e)


def test_the_behaviour_versions_section_lists_every_version_and_the_newest():
    from tvbod.core.behaviours import NEWEST

    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("### Behaviour versions"):]
    section = section[:section.index("\n## ")]
    rows = re.findall(r"^\| (\d+) \|", section, re.M)
    assert rows == [str(v) for v in range(1, NEWEST + 1)]
    assert f"this tvbod writes {NEWEST}." in " ".join(section.split())
