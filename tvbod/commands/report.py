"""`tvbod report PLANT_DIR [--out FILE.html]` / `tvbod report --all STATE_DIR [--out DIR]`:
a one-file HTML report per plant, read-only, offline.

The page (tvbod/report/): the measurement per step with resets and regime changes marked, both
trigger tests' statistics against their thresholds, the gains tried and the incumbent in physical
units, the gains to deploy now with the predicted measurement and std (the rule of `tvbod best`,
on the optimizer a restore would serve), the safe set when the plant has `safety:`, the events an
operator acts on, and the plant's configuration. Units, the description and the plant file come
from the daemon file when one is found (`--config`, else the usual search); without one the page
shows the optimizer settings the state records. Works on a live state directory and changes
nothing. Exit 2 for a path that is not a plant's or a state directory, 1 when a page cannot be
written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tvbod.service.daemon_file import CONFIG_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a plant's state directory (STATE/plants/NAME), "
                        "or with --all a state directory")
    parser.add_argument("--all", action="store_true", help="one page per plant of the state "
                        "directory PATH")
    parser.add_argument("--out", type=Path, help="the page (default PLANT.html in the current "
                        "directory); with --all a folder (default: the current directory)")
    parser.add_argument("--config", metavar="FILE", help=f"{CONFIG_HELP}; the plants' units and "
                        "files come from it")
    parser.add_argument("--last", type=int, metavar="N", help="only the newest N steps (bounds "
                        "the page's size for a long history)")


def plant_configs(config: str | None) -> dict:
    """Plant name -> PlantConfig from the daemon file, or {} when none is found. A file named
    with --config that does not load is an error."""
    from tvbod.service.config import ConfigError, load_daemon_config

    try:
        return {pc.name: pc for pc in load_daemon_config(config).plants}
    except ConfigError as exc:
        if config is not None:
            raise SystemExit(f"tvbod report: configuration error: {exc}") from None
        return {}


def write_report(plant_dir: Path, out: Path, pc=None, last: int | None = None) -> Path:
    """Collect, render and write one plant's page atomically; returns its path."""
    from tvbod import __version__
    from tvbod.report.data import collect
    from tvbod.report.page import render

    html = render(collect(plant_dir, pc, last), __version__)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def run(args: argparse.Namespace) -> int:
    from tvbod.commands.inspect import is_plant_dir, plant_dirs

    if args.last is not None and args.last < 1:
        print("tvbod report: --last must be at least 1", file=sys.stderr)
        return 2
    if args.all:
        dirs = plant_dirs(args.path) if (args.path / "plants").is_dir() else []
    else:
        dirs = [args.path] if is_plant_dir(args.path) else []
    if not dirs:
        what = "a state directory (with plants/)" if args.all else \
            "a plant's state directory (STATE/plants/NAME)"
        print(f"tvbod report: {args.path} is not {what}", file=sys.stderr)
        return 2
    configs = plant_configs(args.config)
    folder = (args.out or Path.cwd()) if args.all else None
    code = 0
    for d in dirs:
        out = folder / f"{d.name}.html" if folder else (args.out or Path.cwd() / f"{d.name}.html")
        try:
            path = write_report(d, out, configs.get(d.name), args.last)
        except OSError as exc:
            print(f"tvbod report: cannot write {out}: {exc}", file=sys.stderr)
            code = 1
            continue
        print(f"tvbod report: {d.name} -> {path}")
    return code
