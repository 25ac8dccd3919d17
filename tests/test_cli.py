"""The command line imports only what the chosen subcommand needs: `tvbod --help` and
`tvbod status` load no scipy and no optimizer strategy (real interpreters, their sys.modules)."""

from pathlib import Path

import pytest

from probes import loaded_modules

ROOT = Path(__file__).resolve().parents[1]

QUIET_MAIN = """\
import contextlib, io
from tvbod.commands import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main({argv!r})
    except SystemExit as e:
        code = e.code
assert code == {code!r}, (code, out.getvalue())
"""
HEAVY = ("scipy", "tvbod.core.strategies", "tvbod.core.gp", "tvbod.service.server")


def heavy_modules(argv: list[str], code: int, heavy: tuple[str, ...] = HEAVY) -> set[str]:
    loaded = loaded_modules(QUIET_MAIN.format(argv=argv, code=code))
    assert "tvbod.commands" in loaded  # the probe ran
    return {m for m in loaded if m.split(".")[0] in heavy or m in heavy}


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["status", "--help"],
                                  ["replay", "--help"], ["run", "--help"]])
def test_help_imports_no_scipy_numpy_or_zmq(argv):
    """Help lists the subcommands from the table in tvbod/commands/__init__.py, importing only the one asked."""
    assert heavy_modules(argv, 0, HEAVY + ("numpy", "zmq")) == set()


def test_status_reads_its_daemon_file_without_scipy(tmp_path):
    daemon = tmp_path / "tvbod.yaml"
    daemon.write_text(f"runtime_dir: {tmp_path}\nstate_dir: {tmp_path}\n"
                      f"plants: {ROOT / 'configs/plants'}/*.yaml\n")
    # No daemon listens there: status loads the file, tries once, and exits 1.
    argv = ["status", "--config", str(daemon), "--timeout", "0.2"]
    # Nor the CURVE machinery (zmq.auth's thread, asyncio): the file has no `security:` section.
    assert heavy_modules(argv, 1, HEAVY + ("asyncio", "zmq.auth.thread")) == set()


def test_a_subcommand_still_gets_its_own_options():
    from tvbod.commands import build_parser

    args = build_parser(["status", "--plant", "cartpole"]).parse_args(["status", "--plant", "cartpole"])
    assert (args.command, args.plant, args._module) == ("status", "cartpole", "tvbod.commands.status")
    full = build_parser()  # no argv: every subcommand complete (the tests of the benches use it)
    assert full.parse_args(["bench", "latency"])._module == "tvbod.bench.latency"
