"""Code text says what and why: no issue numbers and no "as in tvbod <= x" remarks in the
package's, the adapters' or the tests' Python files (the history lives in git and docs/)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: `issue 6`, `Issue 15's`, `issues #12`, and remarks on how an older release behaved.
LAB_NOTES = re.compile(r"\bissues?\s*#?\d+|\bas in tvbod\s*<=", re.IGNORECASE)


def _python_files():
    for top in ("tvbod", "plant_adapters", "tests"):
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_issue_numbers_or_release_remarks_in_code():
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in _python_files() if p != Path(__file__).resolve()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
            if LAB_NOTES.search(line)]
    assert not hits, "lab notes in code text:\n" + "\n".join(hits)


def test_the_pattern_finds_what_it_is_meant_to():
    assert LAB_NOTES.search("the uncertainty penalty of issue 6")
    assert LAB_NOTES.search("Issue 15's goals") and LAB_NOTES.search("see issues #12")
    assert LAB_NOTES.search("the default, as in tvbod <= 0.2")
    assert not LAB_NOTES.search("tissue 3") and not LAB_NOTES.search("an issue with the map")
