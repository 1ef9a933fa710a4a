"""Durable records of verification outcomes, runs and metrics (SQLite through SQLAlchemy)."""

if __name__ != "forkgym.store":  # imported as a top-level `store` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.store; install forkgym "
        "(`pip install -e .`) and import forkgym.store instead of `store`"
    )


from .engine import StoreURLError, check_url, default_url, is_sqlite, make_engine
from .migrate import upgrade
from .models import Base, OutcomeRow, RunRow
from .queries import (
    find_outcomes,
    get_outcome,
    iter_outcomes,
    latency_percentiles,
    page_outcomes,
    slowest,
    status_counts,
    write_jsonl,
)
from .writer import Conflict, OutcomeWriter, StoreClosed

__all__ = [
    "Base",
    "Conflict",
    "OutcomeRow",
    "OutcomeWriter",
    "RunRow",
    "StoreClosed",
    "StoreURLError",
    "check_url",
    "default_url",
    "find_outcomes",
    "get_outcome",
    "is_sqlite",
    "iter_outcomes",
    "latency_percentiles",
    "make_engine",
    "page_outcomes",
    "slowest",
    "status_counts",
    "upgrade",
    "write_jsonl",
]
