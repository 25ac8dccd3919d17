"""`tvbod init DIR`: a complete tree that the daemon loads, adapters pointing at the daemon's
default endpoint, units for this environment, never an overwrite, and no units whose sandbox
hides their interpreter (`--force` writes them with a warning)."""

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
import yaml

from tvbod.service.config import load_daemon_config
from tvbod.commands.init import SYSTEMD_ENV, _units_paths, sandbox_problem

TREE = ["adapters/cartpole.yaml", "adapters/temperature.yaml", "monitoring/alerts.test.yaml",
        "monitoring/alerts.yaml", "monitoring/grafana-dashboard.json",
        "monitoring/prometheus.yaml", "plants/INTEL-LAB-DATA.md",
        "plants/cartpole-safe.yaml", "plants/cartpole.yaml", "plants/temperature.yaml", "plants/temperature_train.csv",
        "systemd/tvbod-adapter-command@.service", "systemd/tvbod-adapter@.service",
        "systemd/tvbod.service", "tvbod.yaml"]
ROOT = Path(__file__).resolve().parents[2]


def _init(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tvbod", "init", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_init_writes_a_tree_the_daemon_loads_with_adapters_on_its_endpoint(tmp_path):
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}
    env.pop("RUNTIME_DIRECTORY", None)
    r = _init(tmp_path / "site", env=env)
    assert r.returncode == 0, r.stderr
    site = tmp_path / "site"
    assert _files(site) == TREE
    config = load_daemon_config(site / "tvbod.yaml", env)
    assert sorted(p.name for p in config.plants) == ["cartpole", "cartpole-safe", "temperature"]
    assert config.endpoints == (f"ipc://{tmp_path}/xdg/tvbod/tvbod.sock",)
    for name in ("cartpole", "temperature"):
        adapter = yaml.safe_load((site / "adapters" / f"{name}.yaml").read_text())
        assert adapter["endpoint"] == config.endpoints[0] and adapter["plant"] == name
    assert "empirical_from: temperature_train.csv" in (site / "plants/temperature.yaml").read_text()
    assert (site / "plants/temperature_train.csv").read_bytes() == \
        (ROOT / "plant_adapters/temperature/data/temperature_train.csv").read_bytes()
    assert f"adapters connect to {config.endpoints[0]}" in r.stdout


def test_init_for_systemd_points_adapters_and_units_at_the_service(tmp_path):
    # The test's own interpreter and tmp_path may well lie where the units' sandbox looks away
    # (/root, /tmp): --force writes the units all the same, with the warning.
    r = _init(tmp_path / "etc", "--systemd", "--force")
    assert r.returncode == 0, r.stderr
    etc = tmp_path / "etc"
    hidden = sandbox_problem(_units_paths(etc))
    assert ("WARNING: units written with --force will not start" in r.stderr) == bool(hidden)
    config = load_daemon_config(etc / "tvbod.yaml", SYSTEMD_ENV)
    assert config.endpoints == ("ipc:///run/tvbod/tvbod.sock",)
    assert yaml.safe_load((etc / "adapters/cartpole.yaml").read_text())["endpoint"] == \
        "ipc:///run/tvbod/tvbod.sock"
    daemon = (etc / "systemd/tvbod.service").read_text()
    adapter = (etc / "systemd/tvbod-adapter@.service").read_text()
    assert f"\nExecStart={Path(sys.prefix)}/bin/tvbod run --config {etc}/tvbod.yaml\n" in daemon
    assert f"\nExecStart={sys.executable} -m plant_adapters.%i --config {etc}/adapters/%i.yaml\n" \
        in adapter
    assert f"\nAssertPathExists={etc}/adapters/%i.yaml\n" in adapter
    command = (etc / "systemd/tvbod-adapter-command@.service").read_text()
    assert f"\nEnvironmentFile={etc}/adapters/%i.env\n" in command
    assert f"\nAssertPathExists={etc}/adapters/%i.env\n" in command
    assert "\nExecStart=/usr/bin/env $TVBOD_ADAPTER_COMMAND\n" in command
    assert not [line for line in command.splitlines()
                if "/etc/tvbod" in line and not line.startswith("#")]
    # everything else is the shipped unit, line for line
    shipped = (ROOT / "systemd/tvbod.service").read_text().splitlines()
    assert [l for l in daemon.splitlines() if not l.startswith("ExecStart=")] == \
        [l for l in shipped if not l.startswith("ExecStart=")]


def test_init_never_overwrites_and_writes_nothing_when_one_file_exists(tmp_path):
    site = tmp_path / "site"
    (site / "plants").mkdir(parents=True)
    (site / "plants" / "cartpole.yaml").write_text("mine\n")
    r = _init(site)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "plants/cartpole.yaml" in r.stderr
    assert "nothing was written" in r.stderr
    assert _files(site) == ["plants/cartpole.yaml"]
    assert (site / "plants" / "cartpole.yaml").read_text() == "mine\n"
    # a second init over a complete tree is refused the same way
    assert _init(tmp_path / "other").returncode == 0
    before = {f: (tmp_path / "other" / f).read_bytes() for f in TREE}
    again = _init(tmp_path / "other")
    assert again.returncode == 2 and "tvbod.yaml" in again.stderr
    assert {f: (tmp_path / "other" / f).read_bytes() for f in TREE} == before


def test_init_refuses_a_file_in_place_of_the_directory(tmp_path):
    (tmp_path / "site").write_text("x")
    r = _init(tmp_path / "site")
    assert r.returncode == 2 and r.stderr.startswith("tvbod init: ")
    assert r.stderr.count("\n") == 1


def test_run_without_a_configuration_points_at_init(tmp_path, monkeypatch, capsys):
    from tvbod.commands import main

    monkeypatch.chdir(tmp_path)  # no configs/tvbod.yaml here, as after installing the wheel
    monkeypatch.delenv("TVBOD_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    if Path("/etc/tvbod/tvbod.yaml").exists():
        pytest.skip("this machine has a system daemon file, which the search would find")
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert f"daemon file: not found; looked at {tmp_path}/configs/tvbod.yaml" in err
    assert "tvbod init DIR" in err
    assert list(tmp_path.iterdir()) == []


def _venv_under_tmp(root: Path) -> Path:
    """A real virtualenv in `root` whose interpreter sees this environment's packages (a `.pth`
    adding our site-packages), so `tvbod` runs from it."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    return venv / "bin" / "python"


def test_init_for_systemd_from_a_venv_under_tmp_is_refused_and_force_warns(tmp_path):
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # under /tmp, wherever tmp_path is
        python = _venv_under_tmp(Path(tmp))
        etc = tmp_path / "etc"
        refused = subprocess.run([str(python), "-m", "tvbod", "init", str(etc), "--systemd"],
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        err = refused.stderr
        assert err.startswith(f"tvbod init: the units would not start: the interpreter {python} ")
        assert "is under /tmp, which the units' PrivateTmp=yes hides from the service" in err
        assert "under /opt or /usr/local" in err and "--force" in err
        assert "nothing was written" in err and not etc.exists()
        forced = subprocess.run([str(python), "-m", "tvbod", "init", str(etc), "--systemd",
                                 "--force"], capture_output=True, text=True, timeout=120)
        assert forced.returncode == 0, forced.stderr
        assert "WARNING: units written with --force will not start: the interpreter" in forced.stderr
        assert f"ExecStart={python} -m plant_adapters.%i" in \
            (etc / "systemd/tvbod-adapter@.service").read_text()
        # without --systemd the units are a by-product: the tree is written, with a note
        local = subprocess.run([str(python), "-m", "tvbod", "init", str(tmp_path / "site")],
                               capture_output=True, text=True, timeout=120)
        assert local.returncode == 0 and "note: the units in systemd/ would not start" in local.stdout


def test_sandbox_check_follows_symbolic_links_into_a_hidden_tree(tmp_path):
    hidden = {str(tmp_path / "home"): "ProtectHome=yes"}
    (tmp_path / "home" / "pyenv").mkdir(parents=True)
    (tmp_path / "home" / "pyenv" / "python3").write_text("")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "python").symlink_to(tmp_path / "home" / "pyenv" / "python3")
    problem = sandbox_problem({"the interpreter": tmp_path / "opt" / "python"}, hidden)
    assert problem == (f"the interpreter {tmp_path}/opt/python (through symbolic links: "
                       f"{tmp_path}/home/pyenv/python3) is under {tmp_path}/home, which the units' "
                       "ProtectHome=yes hides from the service")
    assert sandbox_problem({"the interpreter": tmp_path / "opt"}, hidden) is None
    assert "the configuration directory" in sandbox_problem(
        {"the configuration directory": tmp_path / "home"}, hidden)
