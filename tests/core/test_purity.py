"""The core is pure: importing and using it loads no service dependency."""

import subprocess
import sys


def test_core_imports_only_numpy_and_scipy():
    code = (
        "import sys\n"
        "from tvbod.core import make_strategy\n"
        "s = make_strategy({'domain': {'lower': [0.0], 'upper': [1.0]}})\n"
        "s.tell(s.ask(), 1.0); s.ask()\n"
        "bad = [m for m in ('zmq', 'structlog', 'yaml', 'msgpack', 'matplotlib', 'torch')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
