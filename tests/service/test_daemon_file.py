"""Every command that reads the daemon file finds it the same way (`--config`, `$TVBOD_CONFIG`,
./configs/tvbod.yaml, the user's ~/.config/tvbod/tvbod.yaml, /etc/tvbod/tvbod.yaml), and when no
place has one it names every place looked at and how to name a file (real processes, real files,
a real daemon)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import Daemon, objective

from tvbod.service.config import ConfigError
from tvbod.service.daemon_file import SYSTEM_DAEMON_FILE, find_daemon_file, search_path

needs_no_system_file = pytest.mark.skipif(
    SYSTEM_DAEMON_FILE.exists(), reason="this machine has /etc/tvbod/tvbod.yaml, which the search "
    "would find")


def _env(home: Path, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TVBOD_CONFIG", "XDG_CONFIG_HOME")}
    return {**env, "HOME": str(home), **extra}


def tvbod(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "tvbod", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


@needs_no_system_file
@pytest.mark.parametrize("argv", [["status"], ["best", "alpha"], ["import", "alpha", "x.csv"],
                                  ["run"]])
def test_a_command_without_a_daemon_file_names_the_places_it_looked_at(tmp_path, argv):
    home = tmp_path / "home"
    r = tvbod(*argv, cwd=tmp_path, env=_env(home))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert (f"daemon file: not found; looked at {tmp_path}/configs/tvbod.yaml, "
            f"{home}/.config/tvbod/tvbod.yaml, /etc/tvbod/tvbod.yaml") in r.stderr
    assert "--config FILE or TVBOD_CONFIG=FILE" in r.stderr and "tvbod init DIR" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, not even HOME


def test_the_search_order_is_config_then_env_then_cwd_then_user_then_system(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert search_path(env) == [Path("configs/tvbod.yaml"), tmp_path / "xdg/tvbod/tvbod.yaml",
                                SYSTEM_DAEMON_FILE]
    user = tmp_path / "xdg" / "tvbod" / "tvbod.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    assert find_daemon_file(None, env) == (user, "the search path")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tvbod.yaml").write_text("")
    assert find_daemon_file(None, env)[0] == Path("configs/tvbod.yaml")
    named = {**env, "TVBOD_CONFIG": str(tmp_path / "named.yaml")}  # used even though missing
    assert find_daemon_file(None, named) == (tmp_path / "named.yaml", "$TVBOD_CONFIG")
    assert find_daemon_file("given.yaml", named) == (Path("given.yaml"), "--config")


@needs_no_system_file
def test_without_xdg_config_home_the_user_file_is_under_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"{tmp_path}/h/.config/tvbod/tvbod.yaml"):
        find_daemon_file(None, {"HOME": str(tmp_path / "h")})


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("discovery")).start()
    c = d.client("alpha")
    for _ in range(3):
        p = c.ask()
        c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    c.hello()
    yield d
    d.stop()


def test_status_and_best_find_the_users_daemon_file_without_config(daemon, tmp_path):
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "tvbod").symlink_to(daemon.root)  # the harness's tree as the user's
    env = _env(tmp_path / "home", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    status = tvbod("status", cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    assert f"endpoint {daemon.endpoint}" in status.stdout and "\nalpha " in status.stdout
    best = tvbod("best", "alpha", cwd=tmp_path, env=env)
    assert best.returncode == 0 and best.stdout.startswith("alpha at t=4 "), best.stderr


def test_tvbod_config_wins_over_the_search_and_a_missing_one_is_named(daemon, tmp_path):
    env = _env(tmp_path, TVBOD_CONFIG=str(daemon.root / "tvbod.yaml"))
    assert "\nalpha " in tvbod("status", cwd=tmp_path, env=env).stdout
    missing = _env(tmp_path, TVBOD_CONFIG=str(tmp_path / "gone.yaml"))
    r = tvbod("status", cwd=tmp_path, env=missing)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{tmp_path}/gone.yaml: file not found (named by $TVBOD_CONFIG)" in r.stderr
    # --config wins over $TVBOD_CONFIG
    ok = tvbod("status", "--config", daemon.root / "tvbod.yaml", cwd=tmp_path, env=missing)
    assert ok.returncode == 0 and "\nalpha " in ok.stdout, ok.stderr
