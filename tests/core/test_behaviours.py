"""Behaviour versions: one table says what each version of tvbod's optimizer does where its
defaults changed; a stored mapping records its version (or tells it by its spelled-out keys),
each old version's entry reproduces the fixtures it wrote, and a user mapping cannot set what
only the version decides."""

import json
from pathlib import Path

import pytest

from tvbod.core import SpecError, parse_spec
from tvbod.core.behaviours import (BEHAVIOURS, FIXED, LEGACY_TOLERANCE, NEWEST, read_stored,
                                   spelled)
from tvbod.core.spec import OptimizerSpec
from tvbod.core.spec_model import HyperSpec
from tvbod.core.spec_sections import TriggerSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOX = {"type": "box", "lower": [0.0, 0.0], "upper": [1.0, 1.0]}
#: (fixture, plant, the version it reads as): each fixture's writer, by its spelled-out keys
WRITERS = [("legacy-0.1.0", "alpha", 1), ("state-0.2.0", "alpha", 2),
           ("state-main-lbfgsb", "beta", 2), ("poisoned-0.2.0/term", "alpha", 6),
           ("poisoned-0.2.0/term", "beta", 5), ("state-main-spelled", "alpha", NEWEST),
           ("state-main-spelled", "beta", 4)]


def test_every_version_fixes_every_setting_and_the_newest_is_the_specs_default():
    assert sorted(BEHAVIOURS) == list(range(1, NEWEST + 1))
    for entry in BEHAVIOURS.values():
        assert set(FIXED) <= set(entry)
    new = BEHAVIOURS[NEWEST]
    hyper, trig = HyperSpec(), TriggerSpec()
    assert (new["hyperparameters.objective"], new["hyperparameters.refit_tolerance"],
            new["hyperparameters.refit_stop"]) == (hyper.objective, hyper.refit_tolerance,
                                                   hyper.refit_stop)
    assert (new["trigger.uninformed"], new["trigger.uninformed_from"], new["trigger.backoff"]) == (
        trig.uninformed, trig.uninformed_from, trig.backoff)
    assert (new["measurement.pessimism"], new["measurement.relevel"], new["budget.tolerance"]) == (
        OptimizerSpec.pessimism, OptimizerSpec.relevel, OptimizerSpec.tolerance)
    old = parse_spec({"domain": BOX, "behaviour": 1, "hyperparameters": {"lengthscales": "map"}})
    assert old.trigger.type == "paper" and old.hyper.objective == "explicit-inverse"
    assert old.tolerance == LEGACY_TOLERANCE["lbfgsb-joint"] and not old.calibrates


def test_a_mapping_names_its_version_and_a_user_one_cannot_set_what_it_fixes():
    assert parse_spec({"domain": BOX}) == parse_spec({"domain": BOX, "behaviour": NEWEST})
    for bad in (0, NEWEST + 1, "newest", True, [2]):
        with pytest.raises(SpecError) as err:
            parse_spec({"domain": BOX, "behaviour": bad})
        assert err.value.key == "behaviour"
    for key in FIXED:
        section, leaf = key.split(".")
        with pytest.raises(SpecError, match="fixed by the behaviour version") as err:
            parse_spec({"domain": BOX, section: {leaf: BEHAVIOURS[NEWEST][key]}})
        assert err.value.key == key
    with pytest.raises(ValueError, match="not a fixed setting"):
        parse_spec({"domain": BOX}, {"seed": 3})


def _stored(fixture: str, plant: str) -> list[dict]:
    """Every optimizer mapping the fixture's plant stored: its optimizer files and checkpoints."""
    from tvbod.service.store import CheckpointStore

    plant_dir = FIXTURES / fixture / "state" / "plants" / plant
    found = [json.loads(p.read_text()) for p in sorted((plant_dir / "optimizers").glob("*.json"))]
    for path in ("checkpoint", "checkpoint.prev"):
        if (plant_dir / path).exists():
            found.append(CheckpointStore._read(plant_dir / path)[0]["optimizer"])
    return found


@pytest.mark.parametrize("fixture, plant, version", WRITERS)
def test_each_fixture_reads_as_the_version_that_wrote_it_and_means_what_it_meant(
        fixture, plant, version):
    for stored in _stored(fixture, plant):
        read = read_stored(stored)
        assert "behaviour" not in stored and read["behaviour"] == version
        assert read_stored(read) == read  # a mapping with its version is read as it is
        parse_spec(read)
        for key in FIXED:  # what it spelled out is its version's, and is left to the version
            section, leaf = key.split(".")
            if isinstance(stored.get(section), dict) and leaf in stored[section]:
                assert stored[section][leaf] == BEHAVIOURS[version][key]
                assert leaf not in read[section]


@pytest.mark.parametrize("fixture, plant, version", [w for w in WRITERS if "poisoned" not in w[0]])
def test_each_old_versions_entry_is_what_its_fixture_needs_to_replay(fixture, plant, version):
    # The fixture's history replays under the version it reads as, and not under the newest
    # (except the newest's own fixture), so the table entry is what reproduces it.
    from tvbod.service.event_files import load_epochs
    from tvbod.commands.replay import checked_history, recorded_optimizer, verify

    plant_dir = FIXTURES / fixture / "state" / "plants" / plant
    history, start, _ = checked_history(plant_dir)
    epochs = load_epochs(plant_dir)
    assert {m["behaviour"] for _, m, _ in epochs} == {version}
    n, divergence, _, _ = verify(recorded_optimizer(plant_dir, None), history, epochs, start,
                                 1e-6)
    assert divergence is None and n == len(history)
    newest = [(t, {**m, "behaviour": NEWEST}, issued) for t, m, issued in epochs]
    if start is not None:
        start = {**start, "optimizer": {**read_stored(start["optimizer"]), "behaviour": NEWEST}}
    n, divergence, _, _ = verify(newest[0][1], history, newest, start, 1e-6)
    assert (divergence is None) is (version == NEWEST or fixture == "state-main-spelled"), (
        n, divergence)
