"""Growth, not absolute time: how a test says "no blow-up" on a machine of any speed or load.

:func:`growth` measures ``fn(unit * n)`` and ``fn(unit * 4n)`` and returns the ratio. Linear
work gives about 4, quadratic about 16; tests bound it generously (8). A small floor keeps two
near-zero timings from making a ratio of noise.

What is measured is the CPU time of the calling thread (``time.thread_time``), not the wall
clock: on a busy machine a wall-clock timing includes the time the thread waited for a core,
and a longer run waits more often (under a load of 12 on two cores the wall-clock ratio of
linear work reached 9.8, its CPU-time ratio stayed at 4). Each size keeps its best of several
interleaved runs, so what load still adds (a cold cache after a switch) is dropped as well.
``fn`` must do its work in the calling thread. Counting the work instead (steps, characters
scanned) would miss the quadratic that matters most here: a regular expression that
backtracks, or ``str.find`` called from every position, does its work inside C, where no
Python-level counter sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["growth"]


def growth(fn: Callable[[str], Any], unit: str, n: int, repeats: int = 5) -> float:
    small, large = unit * n, unit * (4 * n)
    best = {len(small): float("inf"), len(large): float("inf")}
    for _ in range(repeats):
        for text in (small, large):
            t0 = time.thread_time()
            fn(text)
            best[len(text)] = min(best[len(text)], time.thread_time() - t0)
    floor = 2e-3  # below a couple of milliseconds, timer and cache noise dominate
    return max(best[len(large)], floor) / max(best[len(small)], floor)
