"""`tvbod bench doc-tables`: the numbers of README.md and docs/benchmarks.md, from results files.

Every number those documents report lives between `<!-- results: NAME -->` and
`<!-- /results: NAME -->`; the text in between is rendered by `tvbod.bench.doc_renders` from the
committed summaries under docs/results/*.json. Each summary records the bench command that
produced its raw output and the commit of the code, so a reader can re-run it:

    tvbod bench doc-tables --import NAME RAW --command "tvbod bench ..."   # a new summary
    tvbod bench doc-tables                                                  # re-render the docs
    tvbod bench doc-tables --check                                          # exit 1 when stale

`--import` keeps the summary tables of a bench's output and drops its per-run lists (the raw
output stays where the bench wrote it), so a summary is small enough to commit.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tvbod.bench.doc_renders import RESULTS, render
from tvbod.errors import TvbodError

#: The documents whose results blocks are rendered, relative to the repository root.
DOCS = ("README.md", "docs/benchmarks.md")
#: Keys of a bench's output that hold one value per run, per step or per histogram bin: left
#: out of a summary.
PER_RUN = frozenset({"R_T", "resets", "reset_times", "taus", "counts", "optimum_sum",
                     "mean_R_t_over_t", "sem_R_t_over_t"})

_BLOCK = re.compile(r"<!-- results: (?P<name>[\w.-]+) -->(?P<body>.*?)<!-- /results: (?P=name) -->",
                    re.DOTALL)


class StaleDocs(TvbodError):
    """A document's results block differs from what its summaries render."""


def repo_root() -> Path:
    """The checkout holding docs/results (this file's grandparent's parent)."""
    return Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- summaries
def strip_per_run(value: Any, drop: frozenset = PER_RUN) -> Any:
    """`value` without the lists under the keys `drop`, at any depth (a scalar under such a key,
    e.g. a paper's reported R_T, stays)."""
    if isinstance(value, dict):
        return {k: strip_per_run(v, drop) for k, v in value.items()
                if not (k in drop and isinstance(v, list))}
    if isinstance(value, list):
        return [strip_per_run(v, drop) for v in value]
    return value


def _commit(root: Path) -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def import_results(root: Path, name: str, raw: Path, command: str,
                   commit: str | None = None, keep: tuple[str, ...] = ()) -> Path:
    """Write docs/results/NAME.json: `raw` (a bench's results.json, or a directory holding
    one) without its per-run lists (but the keys `keep`), with the command that produced it
    and the commit."""
    source = raw / "results.json" if raw.is_dir() else raw
    raw_results = json.loads(source.read_text(encoding="utf-8"))
    summary = {"command": command, "commit": commit or _commit(root),
               "results": strip_per_run(raw_results, PER_RUN - set(keep))}
    out = root / RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


# ---------------------------------------------------------------------------- rendering
def render_text(text: str, root: Path) -> str:
    """`text` with every results block re-rendered from the summaries."""
    def one(m: re.Match) -> str:
        body = render(m.group("name"), root)
        inline = "\n" not in m.group("body")
        body = body.strip() if inline else "\n" + body.strip("\n") + "\n"
        return f"<!-- results: {m.group('name')} -->{body}<!-- /results: {m.group('name')} -->"

    return _BLOCK.sub(one, text)


def blocks(text: str) -> dict[str, str]:
    """`{name: body}` of the results blocks of `text`."""
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def stale(root: Path, docs: tuple[str, ...] = DOCS) -> list[str]:
    """`doc: block` for every results block whose text differs from its rendering."""
    out = []
    for doc in docs:
        text = (root / doc).read_text(encoding="utf-8")
        rendered = blocks(render_text(text, root))
        out += [f"{doc}: {name}" for name, body in blocks(text).items()
                if rendered[name] != body]
    return out


def rewrite(root: Path, docs: tuple[str, ...] = DOCS) -> list[str]:
    """Re-render every results block in place; the documents that changed."""
    changed = []
    for doc in docs:
        path = root / doc
        text = path.read_text(encoding="utf-8")
        new = render_text(text, root)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(doc)
    return changed


# ---------------------------------------------------------------------------- command
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming every stale results block")
    parser.add_argument("--import", dest="import_", nargs=2, metavar=("NAME", "RAW"),
                        help="write docs/results/NAME.json from a bench's output RAW")
    parser.add_argument("--command", help="with --import: the bench command that wrote RAW")
    parser.add_argument("--commit", help="with --import: the code's commit (default: HEAD)")
    parser.add_argument("--keep", default="", help="with --import: comma list of per-run keys "
                        "to keep (a bench whose whole output is its runs, e.g. resets)")
    parser.add_argument("--root", type=Path, default=None,
                        help="the checkout (default: the one this module is in)")


def run(args: argparse.Namespace) -> int:
    root = args.root or repo_root()
    if args.import_:
        if not args.command:
            print("doc-tables: --import needs --command (the bench command that wrote RAW)",
                  file=sys.stderr)
            return 2
        name, raw = args.import_
        keep = tuple(k for k in args.keep.split(",") if k)
        out = import_results(root, name, Path(raw), args.command, args.commit, keep)
        print(f"wrote {out}")
        return 0
    if args.check:
        bad = stale(root)
        for line in bad:
            print(f"stale: {line} (run `tvbod bench doc-tables`)", file=sys.stderr)
        return 1 if bad else 0
    for doc in rewrite(root):
        print(f"rewrote {doc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tvbod bench doc-tables", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
