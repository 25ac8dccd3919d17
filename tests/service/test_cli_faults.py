"""The command line's small faults: one line instead of a traceback, rc != 0 on nonsense, and a
mistyped state_dir is refused instead of silently starting an empty history."""

import math
import os
import subprocess
import sys
import textwrap

import pytest

from daemon_harness import Daemon, objective, plant_yaml

from tvbod.commands.replay import _deviation


def _tvbod(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tvbod", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kw)


def _recorded_plant(tmp_path, steps=5):
    d = Daemon(tmp_path / "d").start()
    with d.client() as c:
        for _ in range(steps):
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    assert d.stop() == 0
    return d


def test_replay_plot_without_matplotlib_is_one_line_not_a_traceback(tmp_path):
    d = _recorded_plant(tmp_path)
    blocker = tmp_path / "no-matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}
    out = _tvbod("replay", d.state / "plants" / "alpha", "--plot", tmp_path / "p.png", env=env)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "tvbod replay: --plot needs matplotlib, which is not installed (pip install 'tvbod[plots]')"]


def test_inspect_into_a_closed_pipe_stops_quietly(tmp_path):
    d = _recorded_plant(tmp_path)
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line: like `| head` that already exited
    proc = subprocess.Popen([sys.executable, "-m", "tvbod", "inspect", str(d.state)], stdout=w,
                            stderr=subprocess.PIPE, text=True)
    os.close(w)
    _, err = proc.communicate(timeout=120)
    assert err == "" and proc.returncode == 141


def test_inspect_of_a_folder_that_is_no_plant_fails(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    out = _tvbod("inspect", tmp_path)
    assert out.returncode == 2 and "neither a state directory" in out.stderr
    assert not (tmp_path / "journal").exists()  # nothing was created there


def test_a_state_dir_whose_parent_is_missing_is_refused_not_created(tmp_path):
    (tmp_path / "plants").mkdir()
    (tmp_path / "plants" / "alpha.yaml").write_text(plant_yaml("alpha"))
    (tmp_path / "tvbod.yaml").write_text(textwrap.dedent("""\
        endpoints: ["ipc://{runtime_dir}/tvbod.sock"]
        runtime_dir: ./run
        state_dir: ./vra/lib/tvbod
        log_format: json
        """))
    out = _tvbod("run", "--config", tmp_path / "tvbod.yaml")
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert "state_dir" in line and "vra/lib/tvbod" in line and "mkdir -p" in line
    assert not (tmp_path / "vra").exists()


def test_replay_compares_recorded_non_finite_psi_by_value():
    assert _deviation("Infinity", math.inf) == 0 and _deviation("-Infinity", -math.inf) == 0
    assert _deviation("NaN", math.nan) == 0 and _deviation(0.25, 0.25) == 0
    assert _deviation("Infinity", 1e308) == math.inf and _deviation("NaN", 0.25) == math.inf
    assert _deviation(0.25, 0.5) == 0.25  # absolute below 1 ...
    assert _deviation([4.0, 1.0], [4.0 + 4e-9, 1.0]) == pytest.approx(1e-9)  # ... relative above
