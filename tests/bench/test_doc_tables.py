"""The numbers of README.md and docs/benchmarks.md come from docs/results/*.json: every results
block is what `tvbod bench doc-tables` renders from the committed summaries, and no number
appears in their prose outside a results block or code."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tvbod.bench import doc_tables
from tvbod.bench.doc_renders import RENDERERS

ROOT = Path(__file__).resolve().parents[2]

#: Digits the prose may hold without a results file, each for a reason:
ALLOWED = (
    r"\b2(-core| cores)\b",          # the machine the results were measured on
    r"\barXiv \d{4}\.\d{4,5}\b",     # the paper's identifier
    r"\bv1\b",                       # the protocol's version
)


def prose(text: str) -> str:
    """`text` without its results blocks, fenced code, inline code, HTML comments, link targets
    and ordered-list markers: what is left is what a writer typed as prose."""
    text = doc_tables._BLOCK.sub(" ", text)
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"^\s*\d+\. ", " ", text, flags=re.MULTILINE)
    for allowed in ALLOWED:
        text = re.sub(allowed, " ", text)
    return text


def numbers_in_prose(text: str) -> list[str]:
    """Every line of the prose of `text` that holds a digit."""
    return [line.strip() for line in prose(text).splitlines() if re.search(r"\d", line)]


@pytest.mark.parametrize("doc", doc_tables.DOCS)
def test_every_results_block_is_what_the_summaries_render(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert doc_tables.blocks(text), f"{doc} has no results block"
    assert doc_tables.stale(ROOT, (doc,)) == []


@pytest.mark.parametrize("doc", doc_tables.DOCS)
def test_no_number_in_the_prose(doc):
    assert numbers_in_prose((ROOT / doc).read_text(encoding="utf-8")) == []


def test_the_prose_check_sees_a_typed_number_and_a_results_block_hides_one():
    assert numbers_in_prose("The daemon answers in 3.1 ms.") == ["The daemon answers in 3.1 ms."]
    assert numbers_in_prose("On 2 cores, `--runs 30`, <!-- results: x -->41<!-- /results: x -->,"
                            " arXiv 2208.10790.\n```sh\nrun 5\n```") == []


def test_every_summary_names_its_command_and_commit():
    for path in sorted((ROOT / doc_tables.RESULTS).glob("*.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))
        assert summary["command"].startswith("tvbod bench "), path.name
        assert re.fullmatch(r"[0-9a-f]{40}", summary["commit"]), path.name


def test_every_renderer_is_used_and_every_block_renders():
    used = set()
    for doc in doc_tables.DOCS:
        used |= set(doc_tables.blocks((ROOT / doc).read_text(encoding="utf-8")))
    assert set(RENDERERS) <= used


def _site(tmp_path: Path) -> Path:
    """A copy of the documents and summaries that the command may rewrite."""
    for rel in (*doc_tables.DOCS, *(f"{doc_tables.RESULTS}/{p.name}"
                                    for p in (ROOT / doc_tables.RESULTS).glob("*.json"))):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def _command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tvbod", "bench", "doc-tables", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_command_finds_a_changed_result_and_rewrites_the_docs(tmp_path):
    site = _site(tmp_path)
    assert _command("--check", "--root", str(site)).returncode == 0
    path = site / doc_tables.RESULTS / "suite-held-out.json"
    summary = json.loads(path.read_text())
    summary["results"]["cells"][0]["R_T_mean"] = 123456.0
    path.write_text(json.dumps(summary))
    check = _command("--check", "--root", str(site))
    assert check.returncode == 1 and "docs/benchmarks.md: held-out" in check.stderr
    assert _command("--root", str(site)).returncode == 0
    assert "123456.0" in (site / "docs/benchmarks.md").read_text()
    assert _command("--check", "--root", str(site)).returncode == 0


def test_import_drops_the_per_run_lists_and_records_the_command(tmp_path):
    raw = tmp_path / "out"
    raw.mkdir()
    (raw / "results.json").write_text(json.dumps(
        {"config": {"runs": 2}, "cells": [{"R_T_mean": 1.5, "R_T": [1.0, 2.0], "resets": [0, 1]}]}))
    r = _command("--import", "tiny", str(raw), "--command", "tvbod bench suite --runs 2",
                 "--root", str(tmp_path))
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / doc_tables.RESULTS / "tiny.json").read_text())
    assert summary["command"] == "tvbod bench suite --runs 2"
    assert summary["results"] == {"config": {"runs": 2}, "cells": [{"R_T_mean": 1.5}]}
