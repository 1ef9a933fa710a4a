"""Growth, not absolute time: how a test says "no blow-up" on a machine of any speed or load.

:func:`growth` times ``fn(unit * n)`` and ``fn(unit * 4n)`` (best of several interleaved
runs each, so a burst of load slows both sizes alike) and returns the ratio. Linear work
gives about 4, quadratic about 16; tests bound it generously (8). A small floor keeps two
near-zero timings from making a ratio of noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["growth"]


def growth(fn: Callable[[str], Any], unit: str, n: int, repeats: int = 3) -> float:
    small, large = unit * n, unit * (4 * n)
    best = {len(small): float("inf"), len(large): float("inf")}
    for _ in range(repeats):
        for text in (small, large):
            t0 = time.perf_counter()
            fn(text)
            best[len(text)] = min(best[len(text)], time.perf_counter() - t0)
    floor = 2e-3  # below a couple of milliseconds, timer and scheduler noise dominate
    return max(best[len(large)], floor) / max(best[len(small)], floor)
