"""The upgrade tests' shared steps: a state fixture written by an earlier version, copied to a
temporary directory, and `tvbod replay` on one of its plants (tests/service/test_upgrade_*)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    """A writable copy of `tests/fixtures/<name>` (its plant files and state directory)."""
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def replay(root: Path, plant: str, *extra: str) -> subprocess.CompletedProcess:
    """`tvbod replay <root>/state/plants/<plant> [extra...]` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "tvbod", "replay",
                           str(root / "state" / "plants" / plant), *extra],
                          capture_output=True, text=True, timeout=120)


def replays_exactly(root: Path, plant: str, steps: int) -> str:
    """Assert that replay reproduces all `steps` steps of `plant`; returns its report."""
    out = replay(root, plant)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{steps} steps reproduced exactly" in out.stdout, out.stdout
    return out.stdout
