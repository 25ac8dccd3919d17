"""The in-process half of `tvbod bench memory`: where a daemon's memory goes.

Run as `python -m tvbod.bench.memory_probe CONFIG [--trace]` in a fresh interpreter (so its
baseline is a daemon's): it imports what `tvbod run` imports, restores every plant of CONFIG's
state directory exactly as the daemon does (`Server.open`: checkpoint + journal replay), prepares
each plant's next proposal (`PlantRuntime.prepare`, the job a tell starts) and reports, as one
JSON object on stdout:

- `stages`: VmRSS after the interpreter started, after the imports, after the restore (and the
  `malloc_trim` that follows it in `tvbod run`), after the proposals, and after another
  `malloc_trim(0)` (as the model threads do after their jobs);
- `malloc`: glibc's `mallinfo2` (bytes in use, free inside the heaps, mmapped);
- `plants`: per plant kind (the name without its digits), the numpy arrays held per plant by
  attribute path (e.g. `strategy.gp.L_`) and the Python objects by top attribute;
- with `--trace`: tracemalloc's top allocation sites (file:line) of what the restore and the
  proposals allocated and kept (tracemalloc inflates RSS, so the stages are measured without it).

It writes what a daemon start writes (event lines, a repaired journal tail), never a checkpoint:
run it on a state directory made for it (`tvbod bench memory` seeds one).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
import time
import types
from collections import defaultdict
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    """This process's VmRSS in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


_START_RSS = rss_mb()  # before any import below: the bare interpreter


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def malloc_info() -> dict[str, float] | None:
    """glibc's view in MB: `in_use` (allocated chunks), `free_in_heaps` (free chunks kept in the
    arenas), `mmapped` (large blocks); None without glibc >= 2.33."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    m = libc.mallinfo2()
    mb = 1024 * 1024
    return {"in_use_mb": m.uordblks / mb, "free_in_heaps_mb": m.fordblks / mb,
            "mmapped_mb": m.hblkhd / mb, "heaps_mb": m.arena / mb}


def _kind(name: str) -> str:
    return re.sub(r"\d+$", "", name) or name


_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _walk(obj: Any, path: str, depth: int, seen: set[int], arrays: dict[str, int],
          objects: dict[str, int], top: str) -> None:
    """Add the arrays reachable from `obj` to `arrays` (path -> bytes, each buffer once) and the
    other objects' own sizes to `objects` (top attribute -> bytes)."""
    import numpy as np

    if id(obj) in seen or depth > 10 or isinstance(obj, _SKIP):
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        if id(base) not in seen or base is obj:
            seen.add(id(base))
            arrays[path] = arrays.get(path, 0) + base.nbytes
        return
    objects[top] = objects.get(top, 0) + sys.getsizeof(obj)
    if isinstance(obj, dict):
        children = [(f"{path}[]", v) for v in obj.values()] + [(path, k) for k in obj]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[]", v) for v in obj]
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        names = list(getattr(obj, "__dict__", {}))
        names += [s for s in getattr(type(obj), "__slots__", ()) if isinstance(s, str)]
        children = [(f"{path}.{n}".lstrip("."), getattr(obj, n, None)) for n in names]
    else:
        return
    for child_path, child in children:
        _walk(child, child_path, depth + 1, seen, arrays, objects,
              top if top else child_path.split("[")[0])


def plant_breakdown(plants: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per plant kind: plant count and the mean bytes per plant of each array path and of the
    Python objects under each top attribute. An object several plants share (an equal optimizer
    spec, the event logger) is counted once, at the first plant that holds it."""
    by_kind: dict[str, list] = defaultdict(list)
    for name, plant in plants.items():
        by_kind[_kind(name)].append(plant)
    out = {}
    seen: set[int] = set()
    for kind, members in sorted(by_kind.items()):
        arrays: dict[str, int] = {}
        objects: dict[str, int] = {}
        for plant in members:  # its state first (strategy, tables), then its other parts
            _walk(plant.state, "", 0, seen, arrays, objects, "")
            _walk(plant, "", 0, seen, arrays, objects, "")
        k = len(members)
        out[kind] = {
            "plants": k,
            "dataset_size": [min(p.strategy.dataset_size for p in members),
                             max(p.strategy.dataset_size for p in members)],
            "numpy_bytes_per_plant": {p: v / k for p, v in sorted(arrays.items(),
                                                                   key=lambda kv: -kv[1])},
            "python_bytes_per_plant": {p: v / k for p, v in sorted(objects.items(),
                                                                    key=lambda kv: -kv[1])},
        }
    return out


def _server(config_path: str):
    import os

    from tvbod.service.config import load_daemon_config
    from tvbod.service.events import EventSink, configure_logging
    from tvbod.service.server import Server

    configure_logging("json", stream=open(os.devnull, "w"))  # noqa: SIM115 - the process's life
    config = load_daemon_config(config_path, isatty=False)
    return Server(config, EventSink())


def probe(config_path: str, trace: bool) -> dict[str, Any]:
    stages = {"interpreter": _START_RSS}
    import numpy  # noqa: F401  - what `tvbod run` has loaded by its first refit
    import scipy.linalg  # noqa: F401
    import scipy.optimize  # noqa: F401
    import zmq  # noqa: F401

    import tvbod.commands.run  # noqa: F401
    import tvbod.service.server  # noqa: F401
    from tvbod.service import malloc

    stages["imports"] = rss_mb()
    if trace:
        import tracemalloc

        tracemalloc.start(1)
    server = _server(config_path)
    t0 = time.perf_counter()
    server.open()
    malloc.trim()  # as `tvbod run` does after the restore
    restore_s = time.perf_counter() - t0
    stages["restored"] = rss_mb()
    t0 = time.perf_counter()
    for plant in server.plants.values():
        plant.run_job(propose=True)
    propose_s = time.perf_counter() - t0
    stages["proposals"] = rss_mb()
    if malloc.trim():  # as the model threads do after their jobs
        stages["after_malloc_trim"] = rss_mb()
    result: dict[str, Any] = {"plants_total": len(server.plants), "restore_s": restore_s,
                              "proposals_s": propose_s, "malloc": malloc_info()}
    if trace:
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        stats = snap.statistics("lineno")
        result["traced_mb"] = sum(s.size for s in stats) / 2**20
        result["top_allocations"] = [
            {"where": f"{_short(s.traceback[0].filename)}:{s.traceback[0].lineno}",
             "mb": s.size / 2**20, "blocks": s.count} for s in stats[:15]]
        tracemalloc.stop()
    result["plants"] = plant_breakdown(server.plants)
    result["stages_rss_mb"] = stages
    return result


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/tvbod/", "/lib/python"):
        if marker in filename:
            return ("tvbod/" if marker == "/tvbod/" else "") + filename.split(marker, 1)[1]
    return filename


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvbod.bench.memory_probe")
    parser.add_argument("config", help="the daemon file whose state directory is restored")
    parser.add_argument("--trace", action="store_true", help="also tracemalloc's top sites")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.config, args.trace)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
