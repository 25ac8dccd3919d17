"""Configuration is validated once, at the edge: the shipped files load, every mistake names its
file and key, directories follow systemd/XDG, and a plant's fingerprint tracks its optimizer."""

import json
import os
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tvbod.core import DomainError, make_strategy, parse_spec
from tvbod.core.errors import TvbodError
from tvbod.commands.keygen import create_key_pair
from tvbod.service.config import (
    ConfigError,
    DaemonConfig,
    FailurePolicy,
    empirical_covariance,
    load_daemon_config,
    load_plant_config,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "tvbod.yaml"
ENV = {"HOME": "/home/op", "XDG_RUNTIME_DIR": "/run/user/1000"}

DAEMON = "plants: plants/*.yaml\n"
PLANT_A = """\
name: a
parameters:
  - {name: x, lower: 0.0, upper: 1.0}
  - {name: y, lower: -2.0, upper: 2.0, unit: m}
sense: maximize
optimizer:
  kernel: {lengthscales: [0.1, 0.2]}
"""
ARMS_3 = """\
name: a
parameters:
  - {name: arm, arms: 3}
sense: maximize
optimizer:
  kernel: {empirical_from: samples.csv}
"""
CSV_3 = "1,2,3\n2,3,5\n0,1,1\n"


def write(tmp_path: Path, overrides: dict[str, str | None] | None = None) -> Path:
    """A daemon file and one plant file in `tmp_path`, with `overrides` {file: text or None}."""
    files = {"tvbod.yaml": DAEMON, "plants/a.yaml": PLANT_A, **(overrides or {})}
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
    return tmp_path / "tvbod.yaml"


def with_daemon(extra: str) -> str:
    return DAEMON + extra


def with_plant(old: str, new: str, base: str = PLANT_A) -> str:
    assert old in base
    return base.replace(old, new)


# ---------------------------------------------------------------------- shipped files
def test_shipped_configs_load():
    cfg = load_daemon_config(SHIPPED, env=ENV)
    assert cfg.path == SHIPPED
    assert cfg.endpoints == ("ipc:///run/user/1000/tvbod/tvbod.sock",)
    assert sorted(p.name for p in cfg.plants) == ["cartpole", "cartpole-safe", "temperature"]
    assert (cfg.checkpoint_every, cfg.request_cache, cfg.max_message_bytes) == (50, 64, 65536)
    cart = cfg.plant("cartpole").optimizer
    assert cart.domain.lower == (-3.0, -6.0, -50.0, -4.0)
    assert cart.domain.upper == (-2.0, -4.0, -25.0, -2.0)
    assert cart.domain.scaling == (0.125, 0.25, 3.0, 0.125)
    assert (cart.sense, cart.strategy, cart.beta_c1, cart.beta_c2) == ("minimize", "et-gp-ucb", 0.8, 4.0)
    # the cost's map to the GP scale is calibrated from the first 20 costs (`measurement: auto`)
    assert cart.calibrates and cart.n_calibration == 20
    assert cart.hyper is not None and (cart.hyper.prior_shape, cart.hyper.refit_every) == (15.0, 1)
    temp = cfg.plant("temperature")
    assert temp.optimizer.domain.n_arms == 50 and temp.optimizer.sense == "maximize"
    for plant in cfg.plants:
        assert make_strategy(plant.optimizer).ask().shape == (len(plant.parameters),)


def test_shipped_temperature_data_lives_in_the_repo():
    # a fresh clone must not need ../shared
    raw = yaml.safe_load((ROOT / "configs/plants/temperature.yaml").read_text())
    csv = (ROOT / "configs/plants" / raw["optimizer"]["kernel"]["empirical_from"]).resolve()
    assert csv.is_file() and ROOT in csv.parents
    assert (csv.parent / "temperature_test.csv").is_file() and (csv.parent / "README.md").is_file()


def test_empirical_kernel_of_the_temperature_data_is_symmetric_positive_definite():
    plant = load_plant_config(ROOT / "configs/plants/temperature.yaml")
    K = np.array(plant.optimizer.kernel.matrix)
    assert K.shape == (50, 50)
    np.testing.assert_array_equal(K, K.T)
    assert np.linalg.eigvalsh(K)[0] > 0
    data = np.loadtxt(ROOT / "plant_adapters/temperature/data/temperature_train.csv", delimiter=",")
    z = (data - data.mean()) / data.std()
    np.testing.assert_allclose(K, np.cov(z), atol=1e-11)


def test_docs_examples_are_the_shipped_files():
    text = (ROOT / "docs/configuration.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    examples = {b["name"]: b for b in blocks if isinstance(b, dict) and "name" in b}
    for name in ("cartpole", "temperature"):
        shipped = yaml.safe_load((ROOT / f"configs/plants/{name}.yaml").read_text())
        shipped.pop("description")
        assert examples[name] == shipped


# ---------------------------------------------------------------------- errors name file and key
CASES = [
    # (id, files to write, file at fault, key, words in the message)
    ("daemon unknown key", {"tvbod.yaml": with_daemon("chekpoint_every: 5\n")},
     "tvbod.yaml", "chekpoint_every", "unknown key"),
    ("plant unknown key", {"plants/a.yaml": PLANT_A + "colour: red\n"},
     "plants/a.yaml", "colour", "unknown key"),
    ("bad type", {"tvbod.yaml": with_daemon("checkpoint_every: '50'\n")},
     "tvbod.yaml", "checkpoint_every", "must be an integer"),
    ("bool is not a number", {"plants/a.yaml": PLANT_A + "proposal_timeout: true\n"},
     "plants/a.yaml", "proposal_timeout", "must be a number"),
    ("out of range", {"tvbod.yaml": with_daemon("request_cache: 0\n")},
     "tvbod.yaml", "request_cache", "[1, 4096]"),
    ("message size out of range", {"tvbod.yaml": with_daemon("max_message_bytes: 100\n")},
     "tvbod.yaml", "max_message_bytes", "out of range"),
    ("bad log format", {"tvbod.yaml": with_daemon("log_format: xml\n")},
     "tvbod.yaml", "log_format", "json"),
    ("unknown model worker kind", {"tvbod.yaml": with_daemon("model_worker_kind: fiber\n")},
     "tvbod.yaml", "model_worker_kind", "process"),
    ("no model workers", {"tvbod.yaml": with_daemon("model_workers: 0\n")},
     "tvbod.yaml", "model_workers", "[1, 64]"),
    ("optimizer out of range", {"plants/a.yaml": with_plant("[0.1, 0.2]", "[0.1, -1.0]")},
     "plants/a.yaml", "optimizer.kernel.lengthscales[1]", "out of range"),
    ("optimizer unknown key", {"plants/a.yaml": PLANT_A + "  colour: red\n"},
     "plants/a.yaml", "optimizer.colour", "unknown key"),
    ("key of another strategy", {"plants/a.yaml": PLANT_A + "  reset_period: 5\n"},
     "plants/a.yaml", "optimizer.reset_period", "r-gp-ucb"),
    ("a setting the behaviour version fixes", {"plants/a.yaml": PLANT_A + "  trigger: {backoff: 1}\n"},
     "plants/a.yaml", "optimizer.trigger.backoff", "is fixed by the behaviour version"),
    ("a fixed MAP setting", {"plants/a.yaml": PLANT_A + "  hyperparameters: {lengthscales: map, "
                             "objective: explicit-inverse}\n"},
     "plants/a.yaml", "optimizer.hyperparameters.objective", "is fixed by the behaviour version"),
    ("the behaviour version itself", {"plants/a.yaml": PLANT_A + "  behaviour: 2\n"},
     "plants/a.yaml", "optimizer.behaviour", "the tvbod that writes the plant's state"),
    ("duplicate plant names", {"plants/b.yaml": PLANT_A},
     "plants/b.yaml", "name", "a.yaml"),
    ("bad plant name", {"plants/a.yaml": with_plant("name: a", "name: ../a")},
     "plants/a.yaml", "name", "not a valid plant name"),
    ("duplicate parameter names", {"plants/a.yaml": with_plant("name: y,", "name: x,")},
     "plants/a.yaml", "parameters[1].name", "already"),
    ("parameter name not an identifier", {"plants/a.yaml": with_plant("name: y,", "name: 2y,")},
     "plants/a.yaml", "parameters[1].name", "identifier"),
    ("lower >= upper", {"plants/a.yaml": with_plant("upper: 1.0", "upper: 0.0")},
     "plants/a.yaml", "parameters[0].upper", "greater than lower"),
    ("scaling on some parameters only", {"plants/a.yaml": with_plant("unit: m", "unit: m, scaling: 2")},
     "plants/a.yaml", "parameters[0].scaling", "every parameter"),
    ("arms mixed with others", {"plants/a.yaml": with_plant("name: y, lower: -2.0, upper: 2.0, unit: m",
                                                              "name: y, arms: 4")},
     "plants/a.yaml", "parameters", "only parameter"),
    ("no parameters", {"plants/a.yaml": with_plant("  - {name: x, lower: 0.0, upper: 1.0}\n"
                                                    "  - {name: y, lower: -2.0, upper: 2.0, unit: m}\n",
                                                    " []\n")},
     "plants/a.yaml", "parameters", "non-empty list"),
    ("sense missing", {"plants/a.yaml": with_plant("sense: maximize\n", "")},
     "plants/a.yaml", "sense", "cost or a reward"),
    ("domain in optimizer", {"plants/a.yaml": PLANT_A + "  domain: {type: box}\n"},
     "plants/a.yaml", "optimizer.domain", "comes from `parameters`"),
    ("sense in optimizer", {"plants/a.yaml": PLANT_A + "  sense: minimize\n"},
     "plants/a.yaml", "optimizer.sense", "comes from the plant's `sense`"),
    ("penalty without value", {"plants/a.yaml": PLANT_A + "failure: {policy: penalty}\n"},
     "plants/a.yaml", "failure.value", "required"),
    ("unknown failure policy", {"plants/a.yaml": PLANT_A + "failure: {policy: ignore}\n"},
     "plants/a.yaml", "failure.policy", "mean_plus_sigma"),
    ("non-loopback tcp (all interfaces)", {"tvbod.yaml": with_daemon("endpoints: ['tcp://*:5555']\n")},
     "tvbod.yaml", "endpoints[0]", "CURVE"),
    ("non-loopback tcp (0.0.0.0)", {"tvbod.yaml": with_daemon("endpoints: ['tcp://0.0.0.0:5555']\n")},
     "tvbod.yaml", "endpoints[0]", "CURVE"),
    ("non-loopback tcp (LAN)", {"tvbod.yaml": with_daemon(
        "endpoints: ['ipc:///tmp/x.sock', 'tcp://192.168.1.20:5555']\n")},
     "tvbod.yaml", "endpoints[1]", "CURVE"),
    ("security without curve", {"tvbod.yaml": with_daemon("security: {}\n")},
     "tvbod.yaml", "security.curve", "is required"),
    ("security not a mapping", {"tvbod.yaml": with_daemon("security: curve\n")},
     "tvbod.yaml", "security", "must be a mapping"),
    ("security unknown key", {"tvbod.yaml": with_daemon("security: {plain: {}}\n")},
     "tvbod.yaml", "security.plain", "unknown key"),
    ("bad endpoint scheme", {"tvbod.yaml": with_daemon("endpoints: ['udp://127.0.0.1:5555']\n")},
     "tvbod.yaml", "endpoints[0]", "unsupported scheme"),
    ("inproc is not a daemon endpoint", {"tvbod.yaml": with_daemon("endpoints: ['inproc://x']\n")},
     "tvbod.yaml", "endpoints[0]", "unsupported scheme"),
    ("port out of range", {"tvbod.yaml": with_daemon("endpoints: ['tcp://127.0.0.1:70000']\n")},
     "tvbod.yaml", "endpoints[0]", "[1, 65535]"),
    ("unbracketed ipv6", {"tvbod.yaml": with_daemon("endpoints: ['tcp://::1:5555']\n")},
     "tvbod.yaml", "endpoints[0]", "brackets"),
    ("abstract ipc socket", {"tvbod.yaml": with_daemon("endpoints: ['ipc://@tvbod']\n")},
     "tvbod.yaml", "endpoints[0]", "socket file path"),
    ("ipc path too long", {"tvbod.yaml": with_daemon(f"endpoints: ['ipc:///{'d' * 120}/s']\n")},
     "tvbod.yaml", "endpoints[0]", "107 bytes"),
    ("unknown placeholder", {"tvbod.yaml": with_daemon("endpoints: ['ipc://{runtime}/s']\n")},
     "tvbod.yaml", "endpoints[0]", "placeholder"),
    ("duplicate endpoints",
     {"tvbod.yaml": with_daemon("endpoints: ['tcp://127.0.0.1:5', 'tcp://127.0.0.1:5']\n")},
     "tvbod.yaml", "endpoints[1]", "twice"),
    ("no plant files", {"tvbod.yaml": "plants: elsewhere/*.yaml\n"},
     "tvbod.yaml", "plants", "matches no plant file"),
    ("duplicate yaml key", {"plants/a.yaml": PLANT_A + "sense: minimize\n"},
     "plants/a.yaml", "sense", "appears twice"),
    ("top level not a mapping", {"plants/a.yaml": "- name: a\n"},
     "plants/a.yaml", None, "mapping at the top level"),
    ("empirical_from missing file", {"plants/a.yaml": ARMS_3},
     "plants/a.yaml", "optimizer.kernel.empirical_from", "cannot read"),
    ("empirical_from rows != arms", {"plants/a.yaml": ARMS_3, "plants/samples.csv": CSV_3 + "1,1,2\n"},
     "plants/a.yaml", "optimizer.kernel.empirical_from", "4 rows"),
    ("empirical_from not numbers", {"plants/a.yaml": ARMS_3, "plants/samples.csv": "a,b\nc,d\ne,f\n"},
     "plants/a.yaml", "optimizer.kernel.empirical_from", "not a CSV of numbers"),
    ("empirical_from on a box", {"plants/a.yaml": with_plant("lengthscales: [0.1, 0.2]",
                                                              "empirical_from: samples.csv")},
     "plants/a.yaml", "optimizer.kernel.empirical_from", "arm parameter"),
    ("arms count mismatch with matrix", {"plants/a.yaml": with_plant(
        "empirical_from: samples.csv", "matrix: [[1.0, 0.0], [0.0, 1.0]]", ARMS_3)},
     "plants/a.yaml", "optimizer.kernel.matrix", "(3, 3)"),
]


@pytest.mark.parametrize("files, at_fault, key, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_error_names_file_and_key(tmp_path, files, at_fault, key, words):
    daemon = write(tmp_path, files)
    with pytest.raises(ConfigError) as info:
        load_daemon_config(daemon, env=ENV)
    e = info.value
    assert isinstance(e, TvbodError)
    assert e.file == tmp_path / at_fault and e.key == key
    line = f":{e.line}" if e.line else ""  # duplicate YAML keys also give the line
    assert str(e).startswith(f"{tmp_path / at_fault}{line}: " + (f"{key}: " if key else ""))
    assert words in str(e)


def test_a_plant_file_records_the_newest_behaviour_version():
    from tvbod.core.behaviours import NEWEST

    for name in ("cartpole", "temperature", "cartpole-safe"):
        config = load_plant_config(ROOT / "configs/plants" / f"{name}.yaml")
        assert config.optimizer_mapping["behaviour"] == NEWEST


@pytest.mark.parametrize("old, new, message", [
    ("lengthscales: 4.2 ", "lengthscales: [4.5, 4.5, -1.0, 4.5] ",
     "optimizer.kernel.lengthscales[2]: -1.0 is out of range (allowed: (0.0, inf])"),
    ("    maxiter: 30\n", "    maxiter: 30\n    refit_stop: scipy\n",  # a fixed setting
     "optimizer.hyperparameters.refit_stop: is fixed by the behaviour version "
     "(docs/configuration.md, Behaviour versions): remove it"),
])
def test_message_format(tmp_path, old, new, message):
    plant = tmp_path / "cartpole.yaml"
    text = (ROOT / "configs/plants/cartpole.yaml").read_text()
    plant.write_text(text.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_plant_config(plant)
    assert str(info.value) == f"{plant}: {message}"


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    daemon = write(tmp_path, {"plants/a.yaml": "name: a\nsense: up: down\n"})
    with pytest.raises(ConfigError) as info:
        load_daemon_config(daemon, env=ENV)
    e = info.value
    assert e.file == tmp_path / "plants/a.yaml" and e.key is None and e.line is not None
    assert str(e).startswith(f"{tmp_path / 'plants/a.yaml'}:{e.line}: invalid YAML")


def test_missing_daemon_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found") as info:
        load_daemon_config(tmp_path / "nope.yaml", env=ENV)
    assert info.value.file == tmp_path / "nope.yaml" and info.value.key is None


def test_config_path_from_environment(tmp_path):
    daemon = write(tmp_path)
    assert load_daemon_config(None, env={**ENV, "TVBOD_CONFIG": str(daemon)}).path == daemon


# ---------------------------------------------------------------------- endpoints and directories
@pytest.mark.parametrize("endpoint", [
    "tcp://127.0.0.1:5555", "tcp://127.0.0.2:1", "tcp://[::1]:65535", "tcp://localhost:5555",
])
def test_loopback_tcp_is_accepted(tmp_path, endpoint):
    daemon = write(tmp_path, {"tvbod.yaml": with_daemon(f"endpoints: ['{endpoint}']\n")})
    cfg = load_daemon_config(daemon, env=ENV)
    assert cfg.endpoints == (endpoint,)


def test_environment_gives_the_directories(tmp_path):
    daemon = write(tmp_path)
    systemd = {**ENV, "RUNTIME_DIRECTORY": "/run/tvbod:/run/other", "STATE_DIRECTORY": "/var/lib/tvbod"}
    cfg = load_daemon_config(daemon, env=systemd)
    assert cfg.runtime_dir == Path("/run/tvbod") and cfg.state_dir == Path("/var/lib/tvbod")
    assert cfg.endpoints == ("ipc:///run/tvbod/tvbod.sock",)
    cfg = load_daemon_config(daemon, env={**ENV, "XDG_STATE_HOME": "/home/op/.st"})
    assert cfg.runtime_dir == Path("/run/user/1000/tvbod") and cfg.state_dir == Path("/home/op/.st/tvbod")
    cfg = load_daemon_config(daemon, env={"HOME": "/home/op"})
    assert cfg.runtime_dir == Path(f"/tmp/tvbod-{os.getuid()}")
    assert cfg.state_dir == Path("/home/op/.local/state/tvbod")


def test_file_keys_win_over_environment_and_resolve_against_the_file(tmp_path):
    daemon = write(tmp_path, {"tvbod.yaml": with_daemon(
        "runtime_dir: run\nstate_dir: ~/st\nendpoints: ['ipc://{runtime_dir}/d.sock', 'ipc://rel.sock']\n")})
    cfg = load_daemon_config(daemon, env={**ENV, "RUNTIME_DIRECTORY": "/x", "STATE_DIRECTORY": "/y"})
    assert cfg.runtime_dir == tmp_path / "run" and cfg.state_dir == Path("/home/op/st")
    assert cfg.endpoints == (f"ipc://{tmp_path}/run/d.sock", f"ipc://{tmp_path}/rel.sock")


@pytest.mark.parametrize("isatty, expected", [(None, "auto"), (True, "console"), (False, "json")])
def test_log_format_auto(tmp_path, isatty, expected):
    assert load_daemon_config(write(tmp_path), env=ENV, isatty=isatty).log_format == expected


def test_plants_globs_are_relative_to_the_daemon_file(tmp_path, monkeypatch):
    daemon = write(tmp_path, {"tvbod.yaml": "plants: [plants/*.yaml, plants/a.yaml]\n"})
    monkeypatch.chdir("/")
    cfg = load_daemon_config(daemon, env=ENV)
    assert [p.path for p in cfg.plants] == [tmp_path / "plants/a.yaml"]


# ---------------------------------------------------------------------- plants
def test_gains_point_round_trip_on_the_shipped_plants():
    cfg = load_daemon_config(SHIPPED, env=ENV)
    cart, temp = cfg.plant("cartpole"), cfg.plant("temperature")
    x = make_strategy(cart.optimizer).ask()
    gains = cart.gains(x)
    assert list(gains) == ["k_x", "k_xd", "k_phi", "k_phid"]
    np.testing.assert_array_equal(cart.point(gains), x)
    arm = make_strategy(temp.optimizer).ask()
    assert temp.gains(arm) == {"sensor": int(arm[0])} and type(temp.gains(arm)["sensor"]) is int
    np.testing.assert_array_equal(temp.point({"sensor": int(arm[0])}), arm)
    assert temp.point({"sensor": 3.0}).dtype == np.int64


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4))
def test_gains_point_round_trip_anywhere_in_the_box(u):
    cart = load_plant_config(ROOT / "configs/plants/cartpole.yaml")
    lo, hi = np.array(cart.optimizer.domain.lower), np.array(cart.optimizer.domain.upper)
    x = lo + np.array(u) * (hi - lo)
    np.testing.assert_array_equal(cart.point(cart.gains(x)), x)


@pytest.mark.parametrize("gains", [
    {"k_x": -2.5, "k_xd": -5.0, "k_phi": -30.0},                                   # missing
    {"k_x": -2.5, "k_xd": -5.0, "k_phi": -30.0, "k_phid": -3.0, "k_y": 1.0},       # unknown
    {"k_x": True, "k_xd": -5.0, "k_phi": -30.0, "k_phid": -3.0},                   # bool
    {"k_x": float("nan"), "k_xd": -5.0, "k_phi": -30.0, "k_phid": -3.0},           # not finite
])
def test_point_validates_names_and_values(gains):
    cart = load_plant_config(ROOT / "configs/plants/cartpole.yaml")
    with pytest.raises(DomainError):
        cart.point(gains)


def test_arm_gains_must_be_integers():
    temp = load_plant_config(ROOT / "configs/plants/temperature.yaml")
    with pytest.raises(DomainError):
        temp.point({"sensor": 2.5})
    with pytest.raises(DomainError):
        temp.gains(np.array([1.5]))


def test_fingerprint_stable_and_tracks_the_optimizer(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text(PLANT_A)
    first = load_plant_config(path)
    assert load_plant_config(path).fingerprint == first.fingerprint
    # not semantic: key order, 3 vs 3.0, description, proposal timeout, failure policy
    path.write_text("sense: maximize\n" + PLANT_A.replace("sense: maximize\n", "")
                    .replace("lower: -2.0", "lower: -2") + "description: hello\nproposal_timeout: 9\n"
                    "failure: {policy: penalty, value: -5}\n")
    assert load_plant_config(path).fingerprint == first.fingerprint
    for changed in (PLANT_A + "  noise_variance: 0.05\n", PLANT_A.replace("[0.1, 0.2]", "[0.1, 0.3]"),
                    PLANT_A.replace("maximize", "minimize"), PLANT_A.replace("unit: m", "unit: cm"),
                    PLANT_A.replace("upper: 2.0", "upper: 3.0")):
        path.write_text(changed)
        assert load_plant_config(path).fingerprint != first.fingerprint


def test_optimizer_mapping_is_plain_data_that_replays(tmp_path):
    plant = load_plant_config(ROOT / "configs/plants/temperature.yaml")
    mapping = json.loads(json.dumps(plant.optimizer_mapping))
    assert mapping["domain"] == {"type": "arms", "n_arms": 50} and mapping["sense"] == "maximize"
    assert "empirical_from" not in mapping["kernel"]
    assert parse_spec(mapping) == plant.optimizer


def test_empirical_covariance_of_a_small_file(tmp_path):
    write(tmp_path, {"plants/a.yaml": ARMS_3, "plants/samples.csv": CSV_3})
    plant = load_plant_config(tmp_path / "plants/a.yaml")
    a = np.array([[1, 2, 3], [2, 3, 5], [0, 1, 1]], dtype=float)
    np.testing.assert_allclose(plant.optimizer.kernel.matrix, np.cov((a - a.mean()) / a.std()), atol=1e-12)
    assert plant.gains(np.array([2])) == {"arm": 2}
    assert empirical_covariance(np.array([[1.0, 2.0, 4.0]])).shape == (1, 1)


def test_failure_policies():
    default = load_plant_config(ROOT / "configs/plants/temperature.yaml").failure
    assert default == FailurePolicy("mean_plus_sigma", sigmas=3.0)
    # towards worse: up for a cost, down for a reward
    assert default.measurement(1.0, 0.5, "minimize") == 2.5
    assert default.measurement(1.0, 0.5, "maximize") == -0.5
    penalty = FailurePolicy("penalty", value=100.0)
    assert penalty.measurement(0.0, 9.0, "minimize") == 100.0


# ---------------------------------------------------------------------- security: CURVE keys
def curve_files(tmp_path: Path) -> dict[str, Path]:
    """`tvbod keygen` output: the server pair in keys/, one adapter's public key in keys/clients/."""
    keys = tmp_path / "keys"
    server_public, server_secret = create_key_pair(keys, "server")
    client_public, client_secret = create_key_pair(keys, "adapter")
    (keys / "clients").mkdir(mode=0o755)
    allowed = keys / "clients" / "adapter.key"
    allowed.write_bytes(client_public.read_bytes())
    return {"server_public": server_public, "server_secret": server_secret,
            "client_public": client_public, "client_secret": client_secret, "allowed": allowed}


def zmq_certificate(path: Path) -> tuple[bytes, bytes | None]:
    import zmq.auth

    return zmq.auth.load_certificate(path)


def with_curve(endpoints: str = "['tcp://0.0.0.0:5555']", secret: str = "keys/server.key_secret",
               allowed: str = "keys/clients") -> str:
    return with_daemon(textwrap.dedent(f"""\
        endpoints: {endpoints}
        security:
          curve:
            server_secret_key: {secret}
            allowed_clients: {allowed}
        """))


@pytest.mark.parametrize("endpoint", [
    "tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.0.2.10:5555", "tcp://[::]:5555",
    "tcp://127.0.0.1:5555",
])
def test_non_loopback_tcp_is_accepted_with_curve(tmp_path, endpoint):
    keys = curve_files(tmp_path)
    cfg = load_daemon_config(write(tmp_path, {"tvbod.yaml": with_curve(f"['{endpoint}']")}), env=ENV)
    assert cfg.endpoints == (endpoint,)
    curve = cfg.curve
    public, secret = zmq_certificate(keys["server_secret"])
    assert (curve.public_key, curve.secret_key) == (public, secret)
    assert curve.server_secret_key_file == keys["server_secret"]
    assert curve.allowed_client_files == (keys["allowed"],)
    assert curve.client_keys == {zmq_certificate(keys["client_public"])[0]}
    assert secret.decode() not in repr(cfg)  # the secret key stays out of logs and tracebacks


def test_without_security_there_is_no_curve(tmp_path):
    assert load_daemon_config(write(tmp_path), env=ENV).curve is None
    assert DaemonConfig.__dataclass_fields__["curve"].default is None


def test_allowed_clients_as_a_list_of_files(tmp_path):
    keys = curve_files(tmp_path)
    second, _ = create_key_pair(tmp_path / "more", "second")
    cfg = load_daemon_config(write(tmp_path, {"tvbod.yaml": with_curve(
        allowed=f"[keys/clients/adapter.key, {second}]")}), env=ENV)
    assert cfg.curve.allowed_client_files == (keys["allowed"], second)
    assert len(cfg.curve.client_keys) == 2


def _bad_key_file(path: Path) -> None:
    path.write_text("this is not a certificate\n")


def _secret_readable_by_others(keys: dict) -> None:
    keys["server_secret"].chmod(0o644)


def _allowed_dir_writable_by_group(keys: dict) -> None:
    keys["allowed"].parent.chmod(0o775)


def _mismatched_pair(keys: dict) -> None:
    text = keys["server_secret"].read_text()
    other = zmq_certificate(keys["client_secret"])[0].decode()
    public = zmq_certificate(keys["server_secret"])[0].decode()
    keys["server_secret"].write_text(text.replace(public, other))


def _short_key(keys: dict) -> None:
    public = zmq_certificate(keys["allowed"])[0].decode()
    keys["allowed"].write_text(keys["allowed"].read_text().replace(public, public[:-1]))


SECURITY_CASES = [
    # (id, daemon file text, change to the key files, key, words in the message)
    ("non-loopback without curve is still refused", with_daemon("endpoints: ['tcp://0.0.0.0:5555']\n"),
     None, "endpoints[0]", "add a `security: {curve: ...}` section"),
    ("server key missing", with_curve(secret="keys/nope.key_secret"), None,
     "security.curve.server_secret_key", "nope.key_secret: key file not found"),
    ("server key is a bad file", with_curve(),
     lambda k: _bad_key_file(k["server_secret"]),
     "security.curve.server_secret_key", "server.key_secret holds no public-key"),
    ("server key is the public file", with_curve(secret="keys/server.key"), None,
     "security.curve.server_secret_key", "server.key holds no secret-key"),
    ("server secret readable by others", with_curve(), _secret_readable_by_others,
     "security.curve.server_secret_key", "chmod 600"),
    ("server public and secret do not match", with_curve(), _mismatched_pair,
     "security.curve.server_secret_key", "does not belong"),
    ("allowed directory missing", with_curve(allowed="keys/nobody"), None,
     "security.curve.allowed_clients", "keys/nobody: directory not found"),
    ("allowed directory empty", with_curve(), lambda k: k["allowed"].unlink(),
     "security.curve.allowed_clients", "holds no public-key file"),
    ("allowed directory writable by group", with_curve(), _allowed_dir_writable_by_group,
     "security.curve.allowed_clients", "chmod go-w"),
    ("allowed directory holds a bad key", with_curve(), lambda k: _bad_key_file(k["allowed"]),
     "security.curve.allowed_clients", "adapter.key holds no public-key"),
    ("allowed key is not Z85", with_curve(), _short_key,
     "security.curve.allowed_clients", "40-character Z85"),
    ("allowed_clients is a file", with_curve(allowed="keys/clients/adapter.key"), None,
     "security.curve.allowed_clients", "is not a directory"),
    ("allowed list entry is a secret", with_curve(allowed="[keys/clients/adapter.key, keys/adapter.key_secret]"),
     None, "security.curve.allowed_clients[1]", "holds a secret key"),
    ("allowed list entry missing", with_curve(allowed="[keys/nope.key]"), None,
     "security.curve.allowed_clients[0]", "nope.key: key file not found"),
    ("allowed list empty", with_curve(allowed="[]"), None,
     "security.curve.allowed_clients", "non-empty list"),
    ("curve key missing", with_daemon("security: {curve: {server_secret_key: keys/server.key_secret}}\n"),
     None, "security.curve.allowed_clients", "is required"),
]


@pytest.mark.parametrize("daemon_text, change, key, words", [c[1:] for c in SECURITY_CASES],
                         ids=[c[0] for c in SECURITY_CASES])
def test_security_errors_name_file_and_key(tmp_path, daemon_text, change, key, words):
    keys = curve_files(tmp_path)
    if change is not None:
        change(keys)
    daemon = write(tmp_path, {"tvbod.yaml": daemon_text})
    with pytest.raises(ConfigError) as info:
        load_daemon_config(daemon, env=ENV)
    e = info.value
    assert e.file == daemon and e.key == key
    assert str(e).startswith(f"{daemon}: {key}: ")
    assert words in str(e)
