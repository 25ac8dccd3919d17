"""`tvbod init DIR`: write a complete, working configuration tree from the shipped files.

    DIR/tvbod.yaml                     the daemon file (every key at its default)
    DIR/plants/cartpole.yaml           the demo plants; the temperature plant's empirical kernel
    DIR/plants/temperature.yaml        reads temperature_train.csv beside it
    DIR/plants/temperature_train.csv
    DIR/plants/INTEL-LAB-DATA.md       where the temperatures come from (attribution)
    DIR/adapters/cartpole.yaml         adapter settings; `endpoint:` is the daemon's default
    DIR/adapters/temperature.yaml      endpoint (see below)
    DIR/systemd/tvbod.service          the units, ExecStart= pointing at this Python environment
    DIR/systemd/tvbod-adapter@.service and --config at DIR; the command template runs any
    DIR/systemd/tvbod-adapter-command@.service  adapter command named in DIR/adapters/NAME.env
    DIR/monitoring/alerts.yaml         Prometheus alert rules, their unit tests
    DIR/monitoring/alerts.test.yaml    (`promtool test rules`), a scrape configuration and a
    DIR/monitoring/prometheus.yaml     Grafana dashboard (docs/deployment.md, Monitoring)
    DIR/monitoring/grafana-dashboard.json

The adapters' `endpoint:` is the endpoint `tvbod run --config DIR/tvbod.yaml` binds when run in
the environment `init` runs in ($XDG_RUNTIME_DIR/tvbod/tvbod.sock, else /tmp/tvbod-<uid>/...);
with `--systemd` it is the one the unit gets (`ipc:///run/tvbod/tvbod.sock`, RuntimeDirectory=).
Nothing is overwritten: if any of these files exists, nothing is written and the exit status is 2.
The tree is validated with the daemon's own loader before anything is written.

The units' sandbox hides `/tmp` and `/var/tmp` (`PrivateTmp=yes`) and `/home`, `/root` and
`/run/user` (`ProtectHome=yes`) from the service. With `--systemd`, an interpreter, virtualenv or
target directory there (checked as given and with every symbolic link resolved) would give units
that cannot start, so `init` refuses (exit 2, nothing written) unless `--force`, which writes them
with a warning. Without `--systemd` the units are a by-product and it only notes it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from tvbod.errors import TvbodError

#: The environment the units give the daemon (StateDirectory=, RuntimeDirectory=).
SYSTEMD_ENV = {"STATE_DIRECTORY": "/var/lib/tvbod", "RUNTIME_DIRECTORY": "/run/tvbod"}
_PLANTS = ("cartpole", "cartpole-safe", "temperature")
#: The plants with an adapter config of their own (`cartpole-safe` is driven by the cart-pole
#: adapter with `--plant cartpole-safe`, as `tvbod demo` does).
_ADAPTERS = ("cartpole", "temperature")
_EMPIRICAL = re.compile(r"^(\s*empirical_from:\s*)(\S+)(.*)$", re.MULTILINE)
#: The monitoring files (configs/monitoring/), written as shipped.
MONITORING = ("alerts.yaml", "alerts.test.yaml", "prometheus.yaml", "grafana-dashboard.json")
_ENDPOINT = re.compile(r"^endpoint:.*$", re.MULTILINE)
#: Trees the units' sandbox hides from the service, and the unit option that hides each.
SANDBOX_HIDDEN = {"/tmp": "PrivateTmp=yes", "/var/tmp": "PrivateTmp=yes",
                  "/home": "ProtectHome=yes", "/root": "ProtectHome=yes",
                  "/run/user": "ProtectHome=yes"}


class InitError(TvbodError):
    """`tvbod init` cannot write the tree (one line for the user)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="directory to write (created; existing files are "
                        "never overwritten)")
    parser.add_argument("--systemd", action="store_true",
                        help="adapter endpoints for the systemd units (ipc:///run/tvbod/tvbod.sock)"
                        " instead of this environment's default")
    parser.add_argument("--force", action="store_true",
                        help="with --systemd: write the units even when their sandbox hides this "
                        "interpreter, virtualenv or DIR (they will not start; a warning says why)")


def _hider(path: Path, hidden: dict[str, str]) -> tuple[str, str] | None:
    """`(hidden tree, unit option)` when `path` lies in one of `hidden`'s trees, else None."""
    for tree, option in hidden.items():
        if path == Path(tree) or Path(tree) in path.parents:
            return tree, option
    return None


def sandbox_problem(paths: dict[str, Path], hidden: dict[str, str] = SANDBOX_HIDDEN) -> str | None:
    """Why the units cannot run `paths` (`{what: path}`: the interpreter, the virtualenv, the
    configuration), each checked as given and resolved through symbolic links; None when they can.
    """
    problems = []
    for what, path in paths.items():
        path = Path(os.path.abspath(path))
        for candidate in dict.fromkeys((path, Path(os.path.realpath(path)))):
            found = _hider(candidate, hidden)
            if found is not None:
                via = "" if candidate == path else f" (through symbolic links: {candidate})"
                problems.append(f"{what} {path}{via} is under {found[0]}, which the units' "
                                f"{found[1]} hides from the service")
                break
    return "; ".join(problems) or None


def _units_paths(target: Path) -> dict[str, Path]:
    """What the units' ExecStart= lines need to see: this interpreter, its virtualenv and standard
    library, and the configuration directory."""
    return {"the interpreter": Path(sys.executable), "the virtualenv": Path(sys.prefix),
            "the interpreter's standard library": Path(sys.base_prefix),
            "the configuration directory": target}


def plant_tree() -> dict[str, bytes]:
    """The shipped plant files with every empirical-kernel CSV beside them: `{name: bytes}`."""
    from tvbod.resources import intel_lab_data, shipped_text

    data = intel_lab_data()
    out: dict[str, bytes] = {}
    for plant in _PLANTS:
        text = shipped_text(f"configs/plants/{plant}.yaml")
        for csv in {Path(m.group(2)).name for m in _EMPIRICAL.finditer(text)}:
            out[csv] = data.joinpath(csv).read_bytes()
            out["INTEL-LAB-DATA.md"] = data.joinpath("README.md").read_bytes()
        text = _EMPIRICAL.sub(lambda m: m.group(1) + Path(m.group(2)).name + m.group(3), text)
        out[f"{plant}.yaml"] = text.encode()
    return out


def _units(target: Path) -> dict[str, bytes]:
    """The shipped units with ExecStart= for this interpreter and the config paths under target."""
    from tvbod.resources import shipped_text

    scripts = Path(sysconfig.get_path("scripts"))
    daemon = str(scripts / "tvbod") if (scripts / "tvbod").exists() else f"{sys.executable} -m tvbod"
    out = {}
    for unit in ("tvbod.service", "tvbod-adapter@.service", "tvbod-adapter-command@.service"):
        lines = []
        for line in shipped_text(f"systemd/{unit}").splitlines():
            if line.startswith(("ExecStart=", "AssertPathExists=", "EnvironmentFile=", "Description=")):
                line = (line.replace("/opt/tvbod/venv/bin/tvbod", daemon)
                        .replace("/opt/tvbod/venv/bin/python", sys.executable)
                        .replace("/etc/tvbod", str(target)))
            lines.append(line)
        out[f"systemd/{unit}"] = ("\n".join(lines) + "\n").encode()
    return out


def build_tree(target: Path, systemd: bool) -> tuple[dict[str, bytes], str]:
    """`({relative path: bytes}, adapter endpoint)` for a tree at `target` (validated, unwritten)."""
    from tvbod.resources import shipped_text
    from tvbod.service.config import load_daemon_config

    files = {"tvbod.yaml": shipped_text("configs/tvbod.yaml").encode()}
    files.update({f"plants/{k}": v for k, v in plant_tree().items()})
    with tempfile.TemporaryDirectory() as tmp:
        for rel, data in files.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        # The daemon's own loader: validates every file and says which endpoint it would bind.
        config = load_daemon_config(Path(tmp) / "tvbod.yaml", SYSTEMD_ENV if systemd else os.environ)
    endpoint = config.endpoints[0]
    why = "the unit's RuntimeDirectory=" if systemd else "tvbod run's default here"
    for plant in _ADAPTERS:
        text = shipped_text(f"configs/adapters/{plant}.yaml")
        text = _ENDPOINT.sub(f"endpoint: {endpoint}   # {why} (tvbod init)", text, count=1)
        files[f"adapters/{plant}.yaml"] = text.encode()
    files.update(_units(target))
    files.update({f"monitoring/{name}": shipped_text(f"configs/monitoring/{name}").encode()
                  for name in MONITORING})
    return files, endpoint


def write_tree(target: Path, files: dict[str, bytes]) -> None:
    """Write `files` under `target`, refusing (before writing anything) if any one exists."""
    existing = [rel for rel in files if (target / rel).exists() or (target / rel).is_symlink()]
    if existing:
        raise InitError(f"{target} already has {', '.join(sorted(existing))}; nothing was written "
                        "(tvbod init never overwrites: choose another directory or move them away)")
    if target.exists() and not target.is_dir():
        raise InitError(f"{target} exists and is not a directory; nothing was written")
    written: list[Path] = []
    try:
        for rel, data in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as f:  # exclusive: never replaces a file created meanwhile
                f.write(data)
            written.append(path)
    except OSError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        raise InitError(f"cannot write {target}: {exc}; nothing was kept") from None


def run(args: argparse.Namespace) -> int:
    from tvbod.service.config import ConfigError

    target = args.dir.expanduser().absolute()
    hidden = sandbox_problem(_units_paths(target))
    try:
        if args.systemd and hidden and not args.force:
            raise InitError(f"the units would not start: {hidden}; install tvbod into a "
                            "virtualenv under /opt or /usr/local made from an interpreter outside "
                            "/home, /root and /tmp and write the tree to /etc/tvbod "
                            "(docs/deployment.md), or pass --force to write them anyway; nothing "
                            "was written")
        files, endpoint = build_tree(target, args.systemd)
        write_tree(target, files)
    except (InitError, ConfigError) as exc:
        print(f"tvbod init: {exc}", file=sys.stderr)
        return 2
    if args.systemd and hidden:
        print(f"tvbod init: WARNING: units written with --force will not start: {hidden} "
              "(docs/deployment.md, Install as a service)", file=sys.stderr)
    print(f"tvbod init: wrote {len(files)} files into {target}")
    print(f"  adapters connect to {endpoint}")
    for rel in sorted(files):
        print(f"  {rel}")
    if hidden and not args.systemd:
        print(f"  note: the units in systemd/ would not start: {hidden}; for systemd install into "
              "/opt and /etc (docs/deployment.md)")
    print(f"next: tvbod run --config {target}/tvbod.yaml, then "
          f"python -m plant_adapters.cartpole --config {target}/adapters/cartpole.yaml")
    return 0
