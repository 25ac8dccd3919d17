"""Two probes several test files share: wait for a condition without a fixed sleep, and list the
modules a fresh interpreter has loaded after running some code (layering and purity checks)."""

from __future__ import annotations

import subprocess
import sys
import time


def wait_for(condition, timeout: float = 120.0, what: str = "condition", interval: float = 0.02):
    """Poll `condition()` until it returns something truthy (returned), or fail after `timeout` s.
    Generous timeouts on purpose: CI is a loaded 2-core machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


WALK = ("import importlib, pkgutil\n"
        "for pkg in ({packages}):\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n")


def loaded_modules(code: str, walk: tuple[str, ...] = ()) -> set[str]:
    """Top-level names of the modules loaded by a fresh interpreter after importing every module
    of the packages `walk` and running `code`."""
    head = "".join(f"import {p}\n" for p in walk)
    if walk:
        head += WALK.format(packages=", ".join(walk) + ",")
    probe = head + code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())
