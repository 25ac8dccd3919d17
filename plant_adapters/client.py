"""The reference client, for adapters written against `plant_adapters.client`.

It lives in `tvbod/client.py` (the daemon's own commands use it too, and `tvbod.service` must not
depend on the adapters package); this module re-exports it unchanged.
"""

from tvbod.client import DaemonClient, DaemonError, DaemonUnavailable, load_curve_keys

__all__ = ["DaemonClient", "DaemonError", "DaemonUnavailable", "load_curve_keys"]
