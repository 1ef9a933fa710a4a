"""The policy interface: token ids in, token ids and behaviour log-probs out.

The trainer and the rollout code see only this interface, so a generation backend (Hugging Face
transformers here, vLLM later) slots in without touching them. Text never round-trips through
the interface: prompts are token ids, continuations come back as the ids that were sampled,
which is what keeps multi-turn episodes token-exact.

Log-prob convention (the trainer relies on it): ``Generation.logprobs[t]`` is
``log softmax(logits_t / T)[token_t]`` over the FULL vocabulary, with ``T`` the request's
temperature (``T = 1`` for greedy requests). It is not renormalised over the top-p nucleus:
the trainer computes the current policy's log-probs the same way, so importance ratios compare
like with like (a renormalised behaviour log-prob would bias every ratio of a top-p sample).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "Generation",
    "GenerationRequest",
    "Policy",
    "SamplingParams",
    "check_scoring",
    "request_seeds",
]


@dataclass(frozen=True)
class SamplingParams:
    """How to continue one prompt. ``greedy=True`` ignores temperature, top-p and seed."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None  # same seed, same prompt, same weights -> same tokens, in any batch

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if not self.greedy and not self.temperature > 0:
            raise ValueError("temperature must be > 0 for sampling (use greedy=True instead)")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class Generation:
    """A continuation: the sampled ids (the stop token included when one was produced)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # one per token id, see the module docstring
    finish_reason: str  # "stop" (a stop token) or "length" (max_new_tokens)


class Policy:
    """What the rollout code and the trainer need from a generation backend: every backend's
    policy extends this class, which says what one that has nothing more to say does (it
    generates beside other engines, frees no memory for the update, shuts nothing down)."""

    # increases with every :meth:`sync_weights`; recorded with each rollout (an attribute or a
    # property of the subclass)
    weight_version: int
    # whether this engine can generate at the same time as another in one process (several
    # engines, generation_engines > 1, run one thread each)
    concurrent: bool = True

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Continue every request in one batched call; results in request order."""
        raise NotImplementedError

    def logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Log-probs (no grad) of ``sequences[i][starts[i]:]`` given their prefixes."""
        raise NotImplementedError

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> Mapping[str, float] | None:
        """Take the trainer's weights: its model (or a state dict; ``None``: the caller says the
        backend already generates with the trainer's model). The backend decides what that
        costs: nothing when it shares the module, a copy when it has its own. ``version`` sets
        :attr:`weight_version` (a resume); by default it moves up by one. Returns what the
        push cost (``bytes``, ``buckets``, ...; logged as ``sync/*``) or nothing."""
        raise NotImplementedError

    def offload(self) -> None:
        """Give back memory during the update (a colocated engine); the next
        :meth:`sync_weights` brings the engine back. By default there is nothing to give."""

    def close(self) -> None:
        """Shut the engine down (a vLLM engine frees its memory; one in a process of its own
        ends). By default there is nothing to shut down."""


def request_seeds(
    requests: Sequence[GenerationRequest], stream: torch.Generator
) -> list[int | None]:
    """Each request's sampling seed, after checking every prompt (nothing is drawn for a bad
    batch): ``None`` for greedy, the request's own seed, or for an unseeded sampled request
    one drawn from the backend's ``stream``, in request order (so a backend built with the
    same seed samples the same tokens)."""
    for i, request in enumerate(requests):
        if not request.prompt_ids:
            raise ValueError(f"request {i} has an empty prompt")
    seeds: list[int | None] = []
    for request in requests:
        params = request.params
        if params.greedy:
            seeds.append(None)
        elif params.seed is not None:
            seeds.append(int(params.seed))
        else:
            seeds.append(int(torch.randint(2**62, (1,), generator=stream)))
    return seeds


def check_scoring(sequences: Sequence[Sequence[int]], starts: Sequence[int]) -> None:
    """The arguments of :meth:`Policy.logprobs`: one start per sequence, each in ``1 .. len``
    (the first token has no prefix to be scored from)."""
    if len(sequences) != len(starts):
        raise ValueError("need one start per sequence")
    for i, (seq, start) in enumerate(zip(sequences, starts, strict=True)):
        if not 1 <= start <= len(seq):
            raise ValueError(
                f"starts[{i}] = {start} must be in 1..{len(seq)} (the first token has no prefix)"
            )
