"""The core is pure: importing and using it loads no service dependency."""

from probes import loaded_modules


def test_core_imports_only_numpy_and_scipy():
    loaded = loaded_modules(
        "from tvbod.core import make_strategy\n"
        "s = make_strategy({'domain': {'lower': [0.0], 'upper': [1.0]}})\n"
        "s.tell(s.ask(), 1.0); s.ask()")
    assert not loaded & {"zmq", "structlog", "yaml", "msgpack", "matplotlib", "torch"}
