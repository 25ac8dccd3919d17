"""The daemon's files and the optimizer spec share the core's validator kit: the same mistake is
worded the same way in both, and the daemon's defaults are its dataclass's."""

import textwrap

import pytest

from tvbod.core import SpecError, parse_spec
from tvbod.core.validate import defaults
from tvbod.service.config import ConfigError, DaemonConfig, load_daemon_config

BOX = {"type": "box", "lower": [0.0], "upper": [1.0]}


def _daemon_file(tmp_path, line: str):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "a.yaml").write_text(textwrap.dedent("""\
        name: a
        parameters: [{name: k, lower: 0.0, upper: 1.0}]
        sense: minimize
        """))
    (tmp_path / "tvbod.yaml").write_text(f"state_dir: ./state\n{line}\n")
    return tmp_path / "tvbod.yaml"


@pytest.mark.parametrize("daemon_line, spec_key, value, problem", [
    ("checkpoint_every: true", "seed", True, "must be an integer, got True"),
    ("request_cache: 1.5", "budget.starts", 1.5, "must be an integer, got 1.5"),
    ("log_level: loud", "sense", "loud", "'loud' is not supported"),
])
def test_daemon_file_and_optimizer_spec_word_the_same_mistake_alike(tmp_path, daemon_line,
                                                                    spec_key, value, problem):
    with pytest.raises(ConfigError) as daemon_err:
        load_daemon_config(_daemon_file(tmp_path, daemon_line), env={"HOME": str(tmp_path)})
    assert daemon_err.value.problem == problem
    mapping = {"domain": BOX}
    node, *rest = spec_key.split(".")
    if rest:
        mapping[node] = {rest[0]: value}
    else:
        mapping[node] = value
    with pytest.raises(SpecError) as spec_err:
        parse_spec(mapping)
    assert spec_err.value.key == spec_key and spec_err.value.problem == problem


def test_daemon_limits_default_to_the_dataclass_defaults(tmp_path):
    config = load_daemon_config(_daemon_file(tmp_path, ""), env={"HOME": str(tmp_path)})
    d = defaults(DaemonConfig)
    assert (config.checkpoint_every, config.request_cache, config.log_level) == (
        d.checkpoint_every, d.request_cache, d.log_level)
    assert (config.model_workers, config.model_worker_kind) == (2, "thread") == (
        d.model_workers, d.model_worker_kind)


def test_the_shipped_daemon_file_spells_out_the_defaults(tmp_path):
    from pathlib import Path

    from tvbod.service.config import DAEMON_LIMITS

    shipped = Path(__file__).resolve().parents[2] / "configs" / "tvbod.yaml"
    config = load_daemon_config(shipped, env={"HOME": str(tmp_path)})
    d = defaults(DaemonConfig)
    for key in (*DAEMON_LIMITS, "log_level", "model_worker_kind"):
        assert getattr(config, key) == getattr(d, key), key
    for key in DAEMON_LIMITS:  # written out, not merely defaulted
        assert f"\n{key}: " in shipped.read_text(), key
