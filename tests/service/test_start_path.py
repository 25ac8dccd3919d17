"""The daemon's start path stays light: opening the shipped plants imports no scipy.stats (the
Sobol set comes from tvbod/core/sobol.py; `import scipy.stats` alone is ~1 s of a start)."""

from pathlib import Path

from probes import loaded_modules

ROOT = Path(__file__).resolve().parents[2]

OPEN_SHIPPED = """\
import io
from tvbod.service.config import load_daemon_config
from tvbod.service.events import EventSink, configure_logging
from tvbod.service.server import Server
env = {{"HOME": {root!r}, "XDG_RUNTIME_DIR": {root!r}, "XDG_STATE_HOME": {root!r}}}
config = load_daemon_config({config!r}, env=env)
configure_logging("json", stream=io.StringIO())
server = Server(config, EventSink())
server.open()
server.bind()
assert sorted(server.plants) == ["cartpole", "cartpole-safe", "temperature"], sorted(server.plants)
for plant in server.plants.values():
    plant.strategy.ask()  # the first proposal of each plant, as the first ask computes it
server.shutdown()
"""


def test_opening_the_shipped_plants_imports_no_scipy_stats(tmp_path):
    code = OPEN_SHIPPED.format(root=str(tmp_path), config=str(ROOT / "configs/tvbod.yaml"))
    loaded = loaded_modules(code)
    assert "tvbod.service.server" in loaded and "scipy.linalg" in loaded  # the probe ran
    assert not {m for m in loaded if m == "scipy.stats" or m.startswith("scipy.stats.")}
