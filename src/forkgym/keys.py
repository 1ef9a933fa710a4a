"""One keying scheme for every random choice in forkgym: a key, never a stream.

A key is a tuple of ints and strings that names one choice (``(run seed, "tasks", stream,
step, i)`` for a training task, ``(env id, kwargs, seed)`` for an environment's episode). Its
``repr`` is hashed with BLAKE2b, personalised by what the digest seeds, so two uses of one key
never share bits. The mapping is a pure function of the key: the same in any process, on any
platform and under any ``PYTHONHASHSEED``.

The environments turn a digest into a NumPy PCG64 state (``forkgym.envs.base``); the agents
into sampling, task, shuffle and engine seeds (``forkgym.agents.seeds``).
"""

from __future__ import annotations

import hashlib

__all__ = ["key_digest", "reset_seeds"]


def key_digest(key: tuple[int | str, ...], *, size: int, purpose: bytes) -> bytes:
    """``size`` bytes (at most 64) that are a pure function of ``key``; ``purpose`` (at most
    16 bytes) separates the uses."""
    return hashlib.blake2b(repr(key).encode(), digest_size=size, person=purpose).digest()


def reset_seeds(first: int, skip: int, count: int) -> range:
    """``count`` consecutive reset seeds after the first ``skip`` from ``first``: a split of a
    list of tasks numbered by seed (the train split first, the eval split after it), not a
    random stream; consecutive seeds name unrelated tasks, since each env hashes its seed."""
    return range(first + skip, first + skip + count)
