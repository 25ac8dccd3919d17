"""The wheel, deployed: built once per session (sdist, then the wheel from the sdist), installed
into a fresh virtualenv outside the checkout, and the README's and docs/deployment.md's commands
run in it as written, as real processes (daemon, both adapters, status, best, inspect, replay,
export, import, demo).

The fresh virtualenv gets tvbod only from the wheel. Its dependencies (numpy, scipy, ...) are the
project virtualenv's, made visible through a `.pth` file that names a directory of links to every
installed distribution *except* tvbod itself, so nothing is downloaded and the checkout is not
importable (checked). The deployment guide's service block names root paths (/opt/tvbod/venv,
/etc/tvbod, /run/tvbod, /var/lib/tvbod); they are mapped to a temporary directory, in the commands
and in the files `tvbod init` wrote, and the daemon is started with the generated unit's
ExecStart= and Environment= plus the StateDirectory=/RuntimeDirectory= variables systemd sets.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
import tarfile
from pathlib import Path

import pytest
from doc_blocks import ROOT, commands, marked_block

from tvbod import __version__

WHEEL = f"tvbod-{__version__}-py3-none-any.whl"
ANALYZE = shutil.which("systemd-analyze")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 300)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def _deps_view(root: Path) -> Path:
    """Links to the project environment's installed distributions, minus tvbod's own entries."""
    view = root / "deps"
    view.mkdir()
    for lib in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
        for entry in Path(lib).iterdir():
            name = entry.name.lower()
            if name.startswith(("tvbod", "__editable__", "plant_adapters", "_virtualenv")) or \
                    name.endswith(".pth") or (view / entry.name).exists():
                continue
            (view / entry.name).symlink_to(entry)
    return view


class Deployment:
    """The session's artifacts: dist/ (sdist + wheel), a fresh venv with the wheel, a path map."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dist = root / "dist"
        self.venv = root / "opt" / "venv"
        self.mapping = {"/opt/tvbod/venv": str(self.venv), "/etc/tvbod": str(root / "etc" / "tvbod"),
                        "/run/tvbod": str(root / "run"), "/var/lib/tvbod": str(root / "state"),
                        "/root/": str(root) + "/"}

    def mapped(self, line: str) -> str:
        for old, new in self.mapping.items():
            line = line.replace(old, new)
        return sys.executable + line[len("python3"):] if line.startswith("python3 ") else line

    def env(self, home: Path, path_first: bool = False) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in (
            "XDG_STATE_HOME", "TVBOD_CONFIG", "RUNTIME_DIRECTORY", "STATE_DIRECTORY",
            "NOTIFY_SOCKET", "PYTHONPATH", "VIRTUAL_ENV")}
        env.update(HOME=str(home), XDG_RUNTIME_DIR=str(home / "xdg"), PYTHONUNBUFFERED="1")
        (home / "xdg").mkdir(parents=True, exist_ok=True)
        if path_first:
            env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"
        return env


@pytest.fixture(scope="session")
def deployment(tmp_path_factory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("wheel"))
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(d.dist), str(ROOT)],
         timeout=600)
    install = commands(marked_block("docs/deployment.md", "test_deployment_service_install"))
    assert install[0] == "python3 -m venv /opt/tvbod/venv", install[0]
    _run(shlex.split(d.mapped(install[0])))
    site = Path(_run([str(d.venv / "bin" / "python"), "-c",
                      "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    (site / "project-dependencies.pth").write_text(f"{_deps_view(d.root)}\n")
    assert install[1].startswith(f"/opt/tvbod/venv/bin/pip install {WHEEL}"), install[1]
    _run(shlex.split(d.mapped(install[1]), comments=True), cwd=d.dist)
    where = _run([str(d.venv / "bin" / "python"), "-c",
                  "import tvbod, plant_adapters; print(tvbod.__file__, plant_adapters.__file__)"],
                 cwd=d.root).stdout
    assert str(ROOT) not in where and where.count(str(site)) == 2, where
    return d


def _bash(block: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """The block as one bash script; a background daemon left behind by a failure is killed."""
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + block + "\n"
    return _run(["bash", "-c", script], cwd=cwd, env=env)


def test_wheel_and_sdist_carry_configs_data_units_and_license(deployment):
    wheel = zipfile.ZipFile(deployment.dist / WHEEL)
    names = set(wheel.namelist())
    shipped = {f"tvbod/shipped/{p}": ROOT / p for p in (
        "LICENSE", "configs/tvbod.yaml", "configs/plants/cartpole.yaml",
        "configs/plants/cartpole-safe.yaml",
        "configs/plants/temperature.yaml", "configs/adapters/cartpole.yaml",
        "configs/adapters/temperature.yaml", "configs/monitoring/alerts.yaml",
        "configs/monitoring/alerts.test.yaml", "configs/monitoring/prometheus.yaml",
        "configs/monitoring/grafana-dashboard.json", "systemd/tvbod.service",
        "systemd/tvbod-adapter@.service", "systemd/tvbod-adapter-command@.service")}
    data = {f"plant_adapters/temperature/data/{f}": ROOT / "plant_adapters/temperature/data" / f
            for f in ("temperature_train.csv", "temperature_test.csv", "README.md")}
    for member, source in {**shipped, **data}.items():
        assert member in names, member
        assert wheel.read(member) == source.read_bytes(), f"{member} differs from {source}"
    meta = wheel.read(f"tvbod-{__version__}.dist-info/METADATA").decode()
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
    assert f"tvbod-{__version__}.dist-info/licenses/LICENSE" in names
    with tarfile.open(deployment.dist / f"tvbod-{__version__}.tar.gz") as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
    assert {"LICENSE", "configs/tvbod.yaml", "systemd/tvbod.service", *shipped, *data} <= members
    version = _run([str(deployment.venv / "bin" / "tvbod"), "--version"]).stdout
    assert version.strip() == f"tvbod {__version__}"


def _pandas_rows(path: Path):
    pandas = pytest.importorskip("pandas")
    return pandas.read_csv(path)


def test_readme_daemon_recipe(deployment, tmp_path):
    (tmp_path / ".venv").symlink_to(deployment.venv)
    env = deployment.env(tmp_path)
    out = _bash(marked_block("README.md", "test_readme_daemon_recipe"), tmp_path, env).stdout
    endpoint = f"ipc://{tmp_path}/xdg/tvbod/tvbod.sock"
    assert f"[cartpole] waiting for the daemon at {endpoint}" in out
    assert "[cartpole] t=8 " in out and "[temperature] t=6 " in out
    assert "[temperature] best gains now (t=7, |D|=" in out
    assert "cartpole at t=9 (|D|=" in out and "deploy k_x=" in out
    # plain and with --tolerance: on the machine that recorded it, both find it bit for bit
    assert out.count("verified: 8 steps reproduced exactly") == 2
    assert "what-if over 8 recorded steps: delta_b=0.01" in out
    page = (tmp_path / "cartpole.html").read_text()  # a wheel with the core dependencies only
    assert '<h1 id="plant-name">cartpole</h1>' in page and "k_phi [N/rad]" in page
    state = tmp_path / ".local" / "state" / "tvbod" / "plants"
    assert sorted(p.name for p in state.iterdir()) == ["cartpole", "cartpole-safe", "temperature"]
    rows = _pandas_rows(tmp_path / "cartpole.csv")
    assert list(rows["t"]) == list(range(1, 9))
    assert list(rows.columns) == ["t", "proposal_id", "k_x", "k_xd", "k_phi", "k_phid",
                                  "measurement", "failed", "psi", "threshold", "reset",
                                  "dataset_size", "wall_time"]
    # the import seeded warm/tvbod; its export is the same history (ids and times aside)
    assert "tvbod import: 8 observations into" in out
    again = tmp_path / "again.csv"
    _run([str(deployment.venv / "bin" / "tvbod"), "export", str(tmp_path / "warm/tvbod/plants/cartpole"),
          "--out", str(again)], env=env)
    same = [c for c in rows.columns if c not in ("proposal_id", "wall_time")]
    imported = _pandas_rows(again)
    assert imported[same].equals(rows[same])
    assert all(p.endswith(".observed") for p in imported["proposal_id"])


def test_deployment_trial_run(deployment, tmp_path):
    env = deployment.env(tmp_path, path_first=True)
    out = _bash(marked_block("docs/deployment.md", "test_deployment_trial_run"), tmp_path, env).stdout
    assert f"tvbod {__version__}" in out
    assert "[cartpole] best gains now (t=7, |D|=" in out
    assert "temperature at t=9 (|D|=" in out and "deploy sensor=" in out
    lines = (tmp_path / "temperature.jsonl").read_text().splitlines()
    assert len(lines) == 8 and '"proposal_id": "temperature:1"' in lines[0]
    assert "verified: 8 steps reproduced exactly" in out
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("demo-"), runs
    assert out.count("steps reproduced exactly") == 4  # the trial's replay + the demo's three
    assert (runs[0] / "plants" / "temperature_train.csv").is_file()
    for plant in ("cartpole", "cartpole-safe", "temperature"):  # no plots extra: the reports
        assert f"{plant}: report {runs[0] / (plant + '.html')}" in out


def test_deployment_monitoring(deployment, tmp_path):
    """`tvbod init` from the wheel writes monitoring/, which promtool accepts as the page says."""
    etc = tmp_path / "etc"
    _run([str(deployment.venv / "bin" / "tvbod"), "init", str(etc)], env=deployment.env(tmp_path))
    shipped = (ROOT / "configs" / "monitoring" / "prometheus.yaml").read_text()
    assert marked_block("docs/deployment.md", "test_deployment_monitoring", 1) == shipped.rstrip()
    assert (etc / "monitoring" / "prometheus.yaml").read_text() == shipped
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (apt-get install prometheus): the block is not run")
    for line in commands(marked_block("docs/deployment.md", "test_deployment_monitoring")):
        out = _run(["bash", "-c", line.replace("/etc/tvbod", str(etc))])
        assert "SUCCESS" in out.stdout, out.stdout


def _unit_command(unit: Path, instance: str | None = None) -> tuple[list[str], dict[str, str]]:
    """ExecStart= as argv and the Environment= assignments of a unit file."""
    argv, env = None, {}
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line[len("ExecStart="):].replace("%i", instance or ""))
        elif line.startswith("Environment="):
            env.update(kv.split("=", 1) for kv in shlex.split(line[len("Environment="):]))
    return argv, env


def test_deployment_service_install(deployment, tmp_path):
    install = commands(marked_block("docs/deployment.md", "test_deployment_service_install"))
    init = install[2]
    assert init == "/opt/tvbod/venv/bin/tvbod init /etc/tvbod --systemd"
    env = deployment.env(tmp_path)
    # The mapped /opt/tvbod and /etc/tvbod lie in a temporary directory, which the units'
    # PrivateTmp= hides: init refuses that unless --force (tests/service/test_init_cmd.py).
    _run(shlex.split(deployment.mapped(init)) + ["--force"], env=env)
    etc = Path(deployment.mapping["/etc/tvbod"])
    for adapter in ("cartpole", "temperature"):
        assert "endpoint: ipc:///run/tvbod/tvbod.sock " in (etc / "adapters" / f"{adapter}.yaml").read_text()
    daemon_argv, daemon_env = _unit_command(etc / "systemd" / "tvbod.service")
    assert daemon_argv == [str(deployment.venv / "bin" / "tvbod"), "run", "--config", f"{etc}/tvbod.yaml"]
    adapter_argv, adapter_env = _unit_command(etc / "systemd" / "tvbod-adapter@.service", "cartpole")
    python = Path(adapter_argv[0])  # the interpreter init ran with, in the fresh venv
    assert python.parent == deployment.venv / "bin" and python.name.startswith("python")
    assert adapter_argv[1:] == ["-m", "plant_adapters.cartpole", "--config",
                                f"{etc}/adapters/cartpole.yaml"]
    if ANALYZE is not None:  # the installed units are clean (ExecStart's programs exist)
        units = tmp_path / "units"
        shutil.copytree(etc / "systemd", units)
        for unit in ("tvbod.service", "tvbod-adapter@cartpole.service"):
            r = subprocess.run([ANALYZE, "verify", "--man=no", str(units / unit)], cwd=units,
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr
    # The service, emulated: /run/tvbod mapped in the adapter files too; the unit's environment.
    for f in (etc / "adapters").iterdir():
        f.write_text(deployment.mapped(f.read_text()))
    service_env = {**env, **daemon_env, "RUNTIME_DIRECTORY": deployment.mapping["/run/tvbod"],
                   "STATE_DIRECTORY": deployment.mapping["/var/lib/tvbod"]}
    Path(service_env["STATE_DIRECTORY"]).mkdir(parents=True, exist_ok=True)
    daemon = subprocess.Popen(daemon_argv, env=service_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        adapter = _run(adapter_argv + ["--steps", "6"], env={**env, **adapter_env})
        assert "[cartpole] t=6 " in adapter.stdout
        tools = commands(marked_block("docs/deployment.md", "test_deployment_service_install", 1))
        outputs = [_run(["bash", "-c", deployment.mapped(line)], env=env).stdout for line in tools]
        assert all(re.search(r"^cartpole\s+et-gp-ucb\s+7\s", o, re.M) for o in outputs[:2])
        assert "cartpole at t=7 (|D|=6" in outputs[2]
        assert "problems" in outputs[3] and "plant cartpole" in outputs[3]
        assert len((deployment.root / "cartpole.csv").read_text().splitlines()) == 7
        pages = sorted(p.name for p in (deployment.root / "reports").iterdir())
        assert pages == ["cartpole-safe.html", "cartpole.html", "temperature.html"], pages
        assert "tvbod report: cartpole -> " in outputs[5]
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.stderr.read()[-3000:]
