"""Keyed seeds: every random choice of a run is a pure function of a key, never of a stream.

A task seed or a sampling seed is a hash of ``(run seed, what, step, index, ...)``, so the
choice made at step ``s`` does not depend on what was drawn before it: a run resumed at ``s``
makes the uninterrupted run's choices, and neighbouring seeds share nothing (``seed + i``
would make runs with seeds 0 and 1 share all but one task).
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["keyed_generator", "request_seed", "task_seeds"]


def request_seed(*key: int | str) -> int:
    """A 63-bit seed for one generation request, a pure function of its key."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8, person=b"forkgym-sample").digest()
    return int.from_bytes(digest, "little") >> 1


def task_seeds(seed: int, stream: str, step: int, n: int) -> list[int]:
    """The task seeds of one step or evaluation: hashed keys, never ``seed + i``."""
    return [request_seed(seed, "tasks", stream, step, i) for i in range(n)]


def keyed_generator(*key: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``key`` (e.g. a step's mini-batch shuffle)."""
    return torch.Generator().manual_seed(request_seed(*key))
