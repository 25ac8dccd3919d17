"""docs/plants.md, *Your own plant*, as written: its plant file, daemon file and adapter script
are written to a temporary directory, its commands run as one shell script (a real daemon, the
adapter as a real process, a real ipc socket), and every measurement the adapter printed must be
in the plant's exported history. The systemd template's command line is expanded from the doc's
environment file by systemd's rules and run against a real daemon the same way."""

from __future__ import annotations

import csv
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from doc_blocks import ROOT, marked_block

DOC = "docs/plants.md"
HERE = "tests/integration/test_own_plant.py"
UNIT = ROOT / "systemd" / "tvbod-adapter-command@.service"
#: Seconds any one process of these tests may take; generous, the tests time nothing.
TIMEOUT = 600


def _block(test: str, n: int) -> str:
    return marked_block(DOC, test, n, file=HERE)


def _site(tmp_path: Path) -> Path:
    """The doc's plant file, daemon file and adapter script, where its commands expect them."""
    test = "test_own_plant_as_written"
    (tmp_path / "site" / "plants").mkdir(parents=True)
    (tmp_path / "site" / "plants" / "speed-loop.yaml").write_text(_block(test, 0) + "\n")
    (tmp_path / "site" / "tvbod.yaml").write_text(_block(test, 1) + "\n")
    (tmp_path / "speed_loop.py").write_text(_block(test, 2) + "\n")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def _told(adapter_output: str) -> list[tuple[int, float, float, float]]:
    """`(t, kp, ki, cost)` of every step the adapter printed."""
    return [(int(m[1]), float(m[2]), float(m[3]), float(m[4])) for m in re.finditer(
        r"^t=(\d+) kp=(\S+) ki=(\S+) cost=(\S+)", adapter_output, re.MULTILINE)]


def _history(tmp_path: Path) -> list[tuple[int, float, float, float]]:
    """`(t, kp, ki, measurement)` of every step of the plant's exported history."""
    out = tmp_path / "history.csv"
    subprocess.run([sys.executable, "-m", "tvbod", "export", "site/state/plants/speed-loop",
                    "--format", "csv", "--out", str(out)], cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=TIMEOUT)
    with out.open(newline="") as f:
        return [(int(r["t"]), float(r["kp"]), float(r["ki"]), float(r["measurement"]))
                for r in csv.DictReader(f)]


def test_own_plant_as_written(tmp_path):
    site = _site(tmp_path)
    script = ("set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
              + _block("test_own_plant_as_written", 3) + "\n")
    proc = subprocess.run(["bash", "-c", script], cwd=site, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    told = _told(proc.stdout)
    assert [t for t, *_ in told] == list(range(1, 31))
    assert _history(site) == told  # every measurement arrived, at the gains it was run with
    assert "speed-loop" in proc.stdout  # status's table and best's answer name the plant
    assert "verified" in proc.stdout.lower()  # the replay


def _env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile= reads them (comments and blanks skipped,
    the value's surrounding whitespace stripped)."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _exec_start(env: dict[str, str]) -> list[str]:
    """The unit's ExecStart= as systemd runs it: a `$VAR` word becomes the variable's value split
    at whitespace; other words stay as they are."""
    line = next(ln for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStart="))
    argv = []
    for word in shlex.split(line[len("ExecStart="):]):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        argv += env.get(m[1], "").split() if m else [word]
    return argv


def test_own_plant_under_the_units_command(tmp_path):
    site = _site(tmp_path)
    env = _env_file(_block("test_own_plant_under_the_units_command", 0))
    assert "EnvironmentFile=/etc/tvbod/adapters/%i.env" in UNIT.read_text().splitlines()
    argv = _exec_start(env)
    assert argv[:2] == ["/usr/bin/env", "/opt/tvbod/venv/bin/python"]
    endpoint = f"ipc://{site}/site/run/tvbod.sock"
    mapped = {"/opt/tvbod/venv/bin/python": sys.executable,
              "/opt/tvbod/adapters/speed_loop.py": str(site / "speed_loop.py"),
              "ipc:///run/tvbod/tvbod.sock": endpoint}
    assert set(mapped) <= set(argv), argv  # the doc's command names the paths mapped here
    argv = [mapped.get(a, a) for a in argv]
    steps = int(argv[argv.index("--steps") + 1])
    daemon = subprocess.Popen([sys.executable, "-m", "tvbod", "run", "--config",
                               str(site / "site" / "tvbod.yaml")], cwd=site,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        adapter = subprocess.run(argv, cwd="/", capture_output=True, text=True, timeout=TIMEOUT,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=TIMEOUT)
    assert adapter.returncode == 0, adapter.stdout[-3000:] + adapter.stderr[-3000:]
    assert daemon.returncode == 0, err[-3000:]
    told = _told(adapter.stdout)
    assert len(told) == steps and _history(site) == told
