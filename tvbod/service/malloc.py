"""Handing freed heap memory back to the kernel (docs/benchmarks.md, *The daemon*).

Every box plant keeps an n x n float64 Cholesky factor (720 KB at n = 300) that each tell replaces
(the append builds the n + 1 one) and each MAP refit rebuilds on a model thread, next to refit
temporaries of the same size. glibc's mmap threshold starts at 128 KiB but adapts: once a mapped
block is freed, blocks up to that size come from the heaps instead, and each thread has its own
heap (arena). The factors then move between the loop's and the model threads' arenas, and the
holes they leave stay resident until `malloc_trim` returns their pages.

`Trimmer` calls `malloc_trim(0)` from the model threads, at most every `TRIM_INTERVAL_S`. (A fixed
mmap threshold, `MALLOC_MMAP_THRESHOLD_=131072`, bounds RSS as well, but then each refit's
temporaries are fresh mappings whose pages fault in at every objective evaluation, which is
slower: docs/benchmarks.md.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import threading
import time

#: Seconds between two `malloc_trim` calls of the model threads at most.
TRIM_INTERVAL_S = 0.2


def _malloc_trim():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_size_t,), ctypes.c_int
    return fn


def trim() -> bool:
    """`malloc_trim(0)` now (after the restore of every plant); False without glibc."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


class Trimmer:
    """`malloc_trim(0)`, at most once per `interval_s` (thread-safe): glibc hands the free pages
    inside every arena back to the kernel. The model threads call it after a job has woken the
    loop (tvbod/service/workers.py), so it never delays a reply; a no-op without glibc."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.calls = 0
        self._last = -math.inf
        self._lock = threading.Lock()
        self._trim = _malloc_trim()

    def __call__(self) -> bool:
        """Trim unless the last trim was less than `interval_s` ago; True if it trimmed."""
        if self._trim is None:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                return False
            self._last = now
        self._trim(0)  # ctypes releases the GIL: the loop keeps answering meanwhile
        self.calls += 1
        return True
