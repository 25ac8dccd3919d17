"""The model threads hand freed heap pages back to the kernel (tvbod/service/malloc.py, issue
15's daemon memory), checked in a real child process through its VmRSS."""

import json
import subprocess
import sys

import pytest


def _glibc_with_malloc_trim() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "malloc_trim")
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _glibc_with_malloc_trim(), reason="needs glibc")


TRIM_CHILD = r"""
import ctypes, json
from tvbod.service.malloc import Trimmer
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
libc.free(libc.malloc(4 << 20))  # the adaptive threshold rises: the blocks below come from the heap
blocks = [libc.malloc(256 << 10) for _ in range(200)]
for b in blocks:
    libc.memset(b, 1, 256 << 10)
for b in blocks[:-1:2]:  # every other block freed (not the last: the heap's top stays in use)
    libc.free(b)
trim = Trimmer(interval_s=3600)
before = rss()
first, second = trim(), trim()
print(json.dumps({"freed": 100 * (256 << 10), "released": before - rss(), "first": first,
                  "second": second, "calls": trim.calls}))
"""


def test_a_trim_hands_free_heap_pages_back_and_runs_at_most_once_per_interval():
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", TRIM_CHILD], capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    res = json.loads(out.stdout)
    assert (res["first"], res["second"], res["calls"]) == (True, False, 1)
    assert res["released"] >= res["freed"] // 2  # the freed blocks' pages, less their edges


def test_a_model_job_that_finished_trims_once_per_interval(tmp_path):
    import socket
    import time

    import structlog

    from daemon_harness import objective, plant_yaml
    from tvbod.protocol import Ask, Tell
    from tvbod.service.config import load_plant_config
    from tvbod.service.events import PlantEventLog
    from tvbod.service.plant import PlantRuntime
    from tvbod.service.store import PlantStore
    from tvbod.service.workers import ModelWorkers

    (tmp_path / "alpha.yaml").write_text(plant_yaml("alpha"))
    store = PlantStore(tmp_path / "state", "alpha")
    log = structlog.wrap_logger(structlog.ReturnLogger(), processors=[])
    rt = PlantRuntime(load_plant_config(tmp_path / "alpha.yaml"), store,
                      PlantEventLog(store.events_path, "alpha", log))
    rt.restore()
    wake_r, wake_w = socket.socketpair()
    workers = ModelWorkers(1, wake_w)
    workers.trim.interval_s = 3600.0
    try:
        for step in range(2):
            ask = rt.ask(Ask(request_id=f"a{step}", plant="alpha"))
            rt.tell(Tell(request_id=f"t{step}", plant="alpha", proposal_id=ask.proposal_id,
                         measurement=objective(ask.gains, ask.t)))
            assert workers.start(rt)
            deadline, done = time.monotonic() + 120, []
            while not done and time.monotonic() < deadline:
                done = workers.collect()
                time.sleep(0.01)
            assert [name for name, _ in done] == ["alpha"] and done[0][1].error is None
        assert workers.trim.calls == 1  # the second job came within the interval
    finally:
        workers.shutdown()
        rt.close()
        wake_r.close()
        wake_w.close()
