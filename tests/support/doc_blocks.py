"""The blocks the README and the docs tell a user to run or write, as written.

A block is a fenced code block (```sh, ```yaml, ```python, ...) directly after a
`<!-- tested: tests/FILE::TEST ... -->` line;
`marked_block(doc, test, n)` returns the text of the n-th block marked for that test, so the test
runs exactly what the document shows, and a document edit that drops or renames a marker fails it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"<!-- tested: (?P<ref>\S+)[^>]*-->\n```[\w-]*\n(?P<body>.*?)\n```", re.DOTALL)


def marked_blocks(doc: str) -> dict[str, list[str]]:
    """`{test reference: [block text, ...]}` of the marked blocks of `doc` (a path in the repo)."""
    out: dict[str, list[str]] = {}
    for m in _BLOCK.finditer((ROOT / doc).read_text(encoding="utf-8")):
        out.setdefault(m.group("ref"), []).append(m.group("body"))
    return out


def marked_block(doc: str, test: str, n: int = 0,
                 file: str = "tests/integration/test_wheel.py") -> str:
    blocks = marked_blocks(doc)
    key = f"{file}::{test}"
    assert len(blocks.get(key, [])) > n, f"{doc} has no block {n} for {key} (found {sorted(blocks)})"
    return blocks[key][n]


def commands(block: str) -> list[str]:
    """The block's command lines (comments and blank lines dropped)."""
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
