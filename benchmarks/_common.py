"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import sys
import time
import warnings
from types import ModuleType
from typing import Any

__all__ = ["TRL_CPU_ARGS", "TimedVerifier", "require_trl"]

# GRPOConfig settings every TRL baseline here shares: fp32 on the CPU, no logging, saving,
# reporting, progress bar or dataloader workers inside the timed loop.
TRL_CPU_ARGS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "fp16": False,
    "logging_steps": 10_000,
    "save_strategy": "no",
    "report_to": "none",
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


def require_trl() -> ModuleType | None:
    """TRL, quietened for a timed run; None (with the install line on stderr) without it."""
    try:
        import trl
    except ImportError:
        print("TRL is not installed: pip install -e .[bench]  (or trl==1.16.0)", file=sys.stderr)
        return None
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return trl


class TimedVerifier:
    """Wraps a verifier to add up the time spent grading (to split a step's time)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0

    def verify(self, reference: str, response: str) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.verify(reference, response)
        finally:
            self.seconds += time.perf_counter() - start
