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


#: The fixtures were recorded on one machine; a CPU whose BLAS kernels round differently in the
#: last bit reproduces them to round-off, not bit for bit (`tvbod replay --tolerance`,
#: docs/reliability.md). Largest deviation seen on such a machine: 6.6e-9. A behaviour change
#: (another trigger, refit or polish rule) moves proposals by far more, or moves a reset.
ROUND_OFF = "1e-6"


def replays_to_round_off(root: Path, plant: str, steps: int, *extra: str) -> str:
    """Assert that replay reproduces all `steps` steps of `plant` (bit for bit on the recording
    machine, within `ROUND_OFF` elsewhere; resets exactly); returns its report."""
    out = replay(root, plant, "--tolerance", ROUND_OFF, *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"verified: {steps} steps reproduced" in out.stdout, out.stdout
    return out.stdout
