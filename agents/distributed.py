"""Data parallelism across processes started by ``torchrun``: which rank this is, and the few
collectives the trainer needs to keep its ranks in step.

``torchrun --nproc-per-node N -m forkgym train --config C.yaml`` starts N copies of the
trainer; each reads ``WORLD_SIZE``/``RANK`` from the environment and joins one process group
(gloo; on GPUs NCCL for CUDA tensors beside it). Every rank generates and trains on its share
of the step's prompts, the learner sums gradients over the ranks (``passes.sync_gradients``), and rank 0
alone evaluates, logs and writes checkpoints. Without ``torchrun`` nothing here does
anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from .learner.sharding import shard_model

T = TypeVar("T")

__all__ = ["World", "backend_for", "init_group", "setup"]


class World:
    """This process's place among the trainer's ranks: the one place that reads the rank and
    the number of ranks from ``torch.distributed`` (:meth:`current`)."""

    def __init__(
        self, rank: int = 0, size: int = 1, *, shards: bool = False, owns_group: bool = False
    ) -> None:
        """``shards``: the ranks hold FSDP2 shards of the training model rather than whole
        copies (``data_parallel: shard`` with more than one rank). ``owns_group``: this World
        joined the process group (:func:`setup`), so :meth:`close` leaves it."""
        self.rank, self.size = rank, size
        self.shards = shards and size > 1
        self.owns_group = owns_group and size > 1

    @classmethod
    def current(cls, **kwargs: Any) -> World:
        """The ranks of this process's ``torch.distributed`` group (one rank outside one)."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), **kwargs)
        return cls(**kwargs)

    def close(self) -> None:
        """Leave the process group this World joined, once every rank is done with it. A
        gloo group left to the interpreter's exit can abort the process while its worker
        threads are torn down (``terminate called without an active exception``). Called
        after a run that ended normally only: a rank that failed must not wait for the
        others in a barrier they may never reach."""
        if self.owns_group and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
        self.owns_group = False

    def place(self, model: torch.nn.Module) -> None:
        """Lay the training model over the ranks: shard it in place when the run shards it
        (agents/learner/sharding.py), else leave it whole. Engines copy it before this."""
        if self.shards:
            shard_model(model)

    def on_main(self, fn: Callable[[], T], otherwise: T) -> T:
        """``fn()`` on rank 0 (an evaluation, a checkpoint written) while the other ranks wait
        for it and get ``otherwise``."""
        out = fn() if self.main else otherwise
        self.barrier()
        return out

    def main_only(self, callback: Callable[..., Any] | None) -> Callable[..., Any] | None:
        """``callback`` on rank 0, None elsewhere (the command line's bar and summaries)."""
        return callback if self.main else None

    def step_metrics(self, generated: int) -> dict[str, int]:
        """The tokens every rank generated this step, and how many ranks ran (under data
        parallelism; the rest of the step's metrics are this rank's)."""
        out = {"tokens_generated": int(self.total(generated))}
        if self.size > 1:
            out["data_parallel_ranks"] = self.size
        return out

    @property
    def main(self) -> bool:
        """Rank 0: the one that evaluates, logs and checkpoints."""
        return self.rank == 0

    def share(self, items: list[int]) -> list[int]:
        """This rank's items of a step: every ``size``-th from its rank (whole groups)."""
        return items[self.rank :: self.size]

    def total(self, value: float) -> float:
        """``value`` summed over the ranks."""
        if self.size == 1:
            return value
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on any (a stop decided by one rank)."""
        return self.total(1.0 if flag else 0.0) > 0

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on rank 0; ``[]`` elsewhere."""
        if self.size == 1:
            return [value]
        out: list[Any] | None = [None] * self.size if self.main else None
        dist.gather_object(value, out, dst=0)
        return out or []

    def agree(self, value: float) -> bool:
        """Whether every rank holds exactly ``value`` (e.g. a checksum of the weights)."""
        if self.size == 1:
            return True
        t = torch.tensor([float(value), -float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t[0]) == -float(t[1])

    def most(self, count: int) -> int:
        """The largest ``count`` over the ranks (this rank's alone on one rank)."""
        if self.size == 1:
            return count
        t = torch.tensor([count], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()


def backend_for(device: str) -> str:
    """The process group's backends: gloo for CPU tensors, and NCCL for CUDA tensors when the
    device is a GPU. The small counts and flags the ranks agree on (:meth:`World.total`,
    :meth:`World.most`) are CPU tensors, which NCCL cannot carry."""
    return "cpu:gloo,cuda:nccl" if str(device).startswith("cuda") else "gloo"


def init_group(device: str = "cpu", **kwargs: Any) -> None:
    """``dist.init_process_group`` with :func:`backend_for` ``device``; ``kwargs`` are its own
    (``init_method``, ``rank``, ``world_size``; by default from ``torchrun``'s environment)."""
    dist.init_process_group(backend_for(device), **kwargs)
    if str(device).startswith("cuda"):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def setup(device: str = "cpu", data_parallel: str = "replicate") -> World:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1); else one rank.
    ``data_parallel``: ``replicate`` (whole copies) or ``shard`` (FSDP2)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    owns = not dist.is_initialized()
    if owns:
        init_group(device)
    return World.current(shards=data_parallel == "shard", owns_group=owns)
