"""Where a command finds the daemon file: the one search every `--config` of the daemon file uses.

In order: `--config FILE`; else `$TVBOD_CONFIG`; else the first of these that exists:

    ./configs/tvbod.yaml                  a checkout, or `tvbod init configs`
    $XDG_CONFIG_HOME/tvbod/tvbod.yaml     the user's (default ~/.config/tvbod/tvbod.yaml):
                                          `tvbod init ~/.config/tvbod`
    /etc/tvbod/tvbod.yaml                 the system's: `tvbod init /etc/tvbod --systemd`

A file named by `--config` or `$TVBOD_CONFIG` is used as given (a missing one is an error, never
a reason to look elsewhere). When no place has a file, the error names every place looked at and
how to name one. Imports nothing heavy, so `--help` texts can quote the order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The first place looked at, relative to the working directory (a checkout's shipped file).
DEFAULT_DAEMON_FILE = Path("configs/tvbod.yaml")
#: The system-wide daemon file, where `tvbod init /etc/tvbod --systemd` writes it.
SYSTEM_DAEMON_FILE = Path("/etc/tvbod/tvbod.yaml")
#: The `--config` help every command that reads the daemon file shows.
CONFIG_HELP = ("daemon file (default: $TVBOD_CONFIG, else the first of ./configs/tvbod.yaml, "
               "~/.config/tvbod/tvbod.yaml, /etc/tvbod/tvbod.yaml that exists)")


def search_path(env: Mapping[str, str] = os.environ) -> list[Path]:
    """The places looked at, in order, when neither `--config` nor `$TVBOD_CONFIG` names a file."""
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    user = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [DEFAULT_DAEMON_FILE, user / "tvbod" / "tvbod.yaml", SYSTEM_DAEMON_FILE]


def find_daemon_file(path: Path | str | None = None,
                     env: Mapping[str, str] = os.environ) -> tuple[Path, str]:
    """`(daemon file, how it was found)`: `path` (from `--config`), else `$TVBOD_CONFIG`, else the
    first existing file of `search_path`. Raises `ConfigError` naming the places looked at when
    none exists."""
    if path is not None:
        return Path(path), "--config"
    if env.get("TVBOD_CONFIG"):
        return Path(env["TVBOD_CONFIG"]), "$TVBOD_CONFIG"
    places = search_path(env)
    for place in places:
        if place.is_file():
            return place, "the search path"
    from tvbod.service.config.common import ConfigError

    raise ConfigError("daemon file", None, "not found; looked at "
                      f"{', '.join(str(Path.cwd() / p) for p in places)}; name one with "
                      "--config FILE or TVBOD_CONFIG=FILE, or write one with `tvbod init DIR`")
