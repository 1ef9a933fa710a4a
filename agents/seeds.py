"""Keyed seeds: every random choice of a run is a pure function of a key, never of a stream.

A task seed, a sampling seed, a mini-batch shuffle or an engine's seed is a hash
(:func:`forkgym.keys.key_digest`, the scheme the environments key their episodes with) of
``(run seed, what, step, index, ...)``, so the choice made at step ``s`` does not depend on
what was drawn before it: a run resumed at ``s`` makes the uninterrupted run's choices, and
neighbouring seeds share nothing (``seed + i`` would make runs with seeds 0 and 1 share all
but one task). This module is the only place that composes a key from the run seed, and the
only place that makes a random generator from a seed (:func:`generator`, :func:`keyed_generator`).
"""

from __future__ import annotations

import hashlib

import torch

from forkgym.keys import key_digest

__all__ = [
    "child_seed",
    "content_generator",
    "engine_seed",
    "generator",
    "keyed_generator",
    "request_seed",
    "sampling_seed",
    "shuffle_key",
    "state_key",
    "task_seeds",
]


def request_seed(*key: int | str) -> int:
    """A 63-bit seed, a pure function of its key."""
    return int.from_bytes(key_digest(key, size=8, purpose=b"forkgym-sample"), "little") >> 1


def task_seeds(seed: int, stream: str, step: int, n: int) -> list[int]:
    """The task seeds of one step or evaluation: hashed keys, never ``seed + i``."""
    return [request_seed(seed, "tasks", stream, step, i) for i in range(n)]


def sampling_seed(seed: int, stream: str, step: int, group: int, branch: int, turn: int) -> int:
    """The seed of one sampled generation request: a branch's turn of a group of a step."""
    return request_seed(seed, stream, step, group, branch, turn)


def state_key(task_seed: int, generated: list[int]) -> int:
    """The key of a state inside an episode (its task and the tokens generated to reach it),
    under which its Monte Carlo continuations are sampled: the same state draws the same
    continuations wherever its episode sits in a batch, on any data-parallel rank."""
    return request_seed("vine-state", task_seed, *generated)


def shuffle_key(seed: int, what: str, step: int, epoch: int) -> tuple[int | str, ...]:
    """The key of one pass's row order (``what``: ``shuffle`` for the policy's update,
    ``critic-shuffle`` for a critic's), for :func:`keyed_generator`."""
    return (seed, what, step, epoch)


def child_seed(seed: int, *key: int | str) -> int:
    """The seed of a part that a run (or a benchmark) starts with a seed of its own: an engine,
    an SFT baseline, a worker (31 bits: any RNG takes it)."""
    return request_seed(seed, *key) >> 32


def engine_seed(seed: int, engine: int) -> int:
    """The seed of the ``engine``-th engine of a pool, in one process or on Ray workers. A pool
    seeds every request itself before handing it on, so its engines never draw from their own
    streams in training or evaluation."""
    return child_seed(seed, "engine", engine)


def generator(seed: int, device: str | torch.device | None = None) -> torch.Generator:
    """A ``torch.Generator`` (on ``device``; the CPU by default) started at ``seed``, a seed
    this module derived (a request's, an engine's) or the run's own."""
    return torch.Generator(device=device or "cpu").manual_seed(seed)


def keyed_generator(*key: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``key`` (e.g. a step's mini-batch shuffle)."""
    return generator(request_seed(*key))


def content_generator(what: str, values: torch.Tensor) -> torch.Generator:
    """A CPU generator keyed by ``what`` and the exact contents of ``values`` (their dtype,
    shape and bytes): a draw inside a loss over one micro-batch (Clip-Cov's) that is the same
    for the same micro-batch in any run, and shares nothing with any other draw."""
    data = values.detach().contiguous().cpu()
    exact = data.to(torch.float64) if data.is_floating_point() else data  # bfloat16 has no numpy
    digest = hashlib.blake2b(exact.numpy().tobytes(), digest_size=16).hexdigest()
    return keyed_generator("content", what, str(data.dtype), *data.shape, digest)
