"""Per-token log-probabilities and entropies of a causal LM, with gradients.

This is how the learner scores its own model, whatever serves generation: any module with
the transformers causal-LM call (``input_ids``, ``attention_mask``, ``position_ids`` in;
``.logits`` out) works, so the trainer never depends on a generation backend. The values
follow the policy interface's convention (:mod:`forkgym.agents.policy`):
``log softmax(logits / T)`` over the full vocabulary, at the sampling temperature ``T``, so
a backend's behaviour log-probs and the learner's compare like with like.

Alignment: entry ``t`` of a ``[B, T]`` result belongs to token ``t`` (its log-prob given the
tokens before it); entry 0 has no prefix and is 0. Padding entries hold garbage: mask them.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "at_least_float32",
    "entropy_from_logits",
    "logprobs_from_logits",
    "position_ids_from_mask",
    "sequence_logits",
    "token_entropy",
    "token_logprobs",
    "token_logprobs_and_entropy",
]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token (left or right padding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_(min=0)


def sequence_logits(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``[B, T, V]`` logits of a full forward (no cache), positions from the mask."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    return out.logits


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 when it is in a narrower float type (bf16, fp16); float64 stays."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def logprobs_from_logits(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``[B, T]``: entry ``t`` is ``log softmax(logits[:, t-1] / T)[input_ids[:, t]]``; entry 0 is 0.

    Computed in float32 at least, as ``logit - logsumexp`` (no ``[B, T, V]`` log-softmax copy).
    """
    scores = at_least_float32(logits[:, :-1])
    if temperature != 1.0:
        scores = scores / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = scores.gather(-1, targets).squeeze(-1) - torch.logsumexp(scores, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0))


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``[B, T]``: entry ``t`` is the entropy of the distribution that produced token ``t``
    (``softmax(logits[:, t-1] / T)``); entry 0 is 0."""
    scores = at_least_float32(logits[:, :-1])
    if temperature != 1.0:
        scores = scores / temperature
    logp = torch.log_softmax(scores, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return torch.nn.functional.pad(entropy, (1, 0))


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Differentiable ``[B, T]`` log-probs of ``input_ids`` under ``model`` (see
    :func:`logprobs_from_logits` for the alignment). Padding entries hold garbage: mask them."""
    logits = sequence_logits(model, input_ids, attention_mask)
    return logprobs_from_logits(logits, input_ids, temperature)


def token_entropy(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``[B, T]`` entropies aligned like :func:`token_logprobs`."""
    return entropy_from_logits(sequence_logits(model, input_ids, attention_mask), temperature)


def token_logprobs_and_entropy(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both from one forward: ``(log-probs [B, T], entropy [B, T])``, differentiable."""
    logits = sequence_logits(model, input_ids, attention_mask)
    return (
        logprobs_from_logits(logits, input_ids, temperature),
        entropy_from_logits(logits, temperature),
    )
