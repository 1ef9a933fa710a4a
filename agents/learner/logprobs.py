"""Per-token log-probabilities and entropies of a causal LM, with gradients.

This is how the learner scores its own model, whatever serves generation: any module with
the transformers causal-LM call (``input_ids``, ``attention_mask``, ``position_ids`` in;
``.logits`` out) works, so the trainer never depends on a generation backend. The values
follow the policy interface's convention (:mod:`forkgym.agents.generation.backends.policy`):
``log softmax(logits / T)`` over the full vocabulary, at the sampling temperature ``T``, so
a backend's behaviour log-probs and the learner's compare like with like.

Alignment: entry ``t`` of a ``[B, T]`` result belongs to token ``t`` (its log-prob given the
tokens before it); entry 0 has no prefix and is 0. Padding entries hold garbage: mask them.

The head (:func:`selected_logprobs`): a token's log-prob is ``x[token] - logsumexp(x)`` of
its float32 scores ``x = logits / T``, and its entropy ``-sum(exp(x - lse) * (x - lse))``.
Written as plain autograd, that keeps a float32 copy of the scores for backward and builds
several ``[B, T, V]`` temporaries (the entropy's, the gather's zero-filled gradient, their
sum); the head here is one autograd function that keeps only the logits it was given and
each position's ``logsumexp``, works through the vocabulary in chunks of at most
:data:`CHUNK_ELEMENTS` scores, and recomputes ``softmax`` per chunk in backward. It does the
same operations on the same numbers as the plain composition, so log-probs, entropies and
gradients equal it (tests/agents/learner/test_logprobs.py); what changes is the memory, which for a
150k vocabulary is the step's largest tensor (``benchmarks/logprob_head.py``).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "CHUNK_ELEMENTS",
    "at_least_float32",
    "entropy_from_logits",
    "logprobs_from_logits",
    "position_ids_from_mask",
    "selected_logprobs",
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


# float32 scores the head holds at once (a chunk's scores and its softmax: 2 x 64 MiB)
CHUNK_ELEMENTS = 2**24


def _chunks(shape: torch.Size, limit: int) -> list[tuple[slice, slice]]:
    """Blocks ``(rows, positions)`` of a ``[B, L, V]`` tensor with at most ``limit`` entries
    each (a single position's ``V`` scores when even one row is over ``limit``)."""
    b, length, vocab = shape
    if b * length * vocab <= limit:
        return [(slice(None), slice(None))]
    if length * vocab <= limit:
        step = limit // (length * vocab)
        return [(slice(r, r + step), slice(None)) for r in range(0, b, step)]
    step = max(1, limit // vocab)
    return [(slice(r, r + 1), slice(p, p + step)) for r in range(b) for p in range(0, length, step)]


def _scores(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Float32 scores of a block of logits (a new tensor whenever the logits change)."""
    x = at_least_float32(logits)
    return x / temperature if temperature != 1.0 else x


class _SelectedLogprobs(torch.autograd.Function):
    """See :func:`selected_logprobs`; the entropy output is not differentiable. Temporaries
    are updated in place (a fresh ``[B, L, V]`` buffer costs its page faults on the CPU)."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, entropy, limit):  # type: ignore[override]
        b, length, _ = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)  # the scores' (float64 stays)
        picked = torch.zeros((b, length), dtype=dtype, device=logits.device)
        lse = torch.empty_like(picked)
        ent = torch.zeros_like(picked) if entropy else None
        valid = targets >= 0
        index = targets.clamp(min=0).unsqueeze(-1)
        for rows, cols in _chunks(logits.shape, limit):
            x = _scores(logits[rows, cols], temperature)
            chunk_lse = torch.logsumexp(x, dim=-1)
            lse[rows, cols] = chunk_lse
            picked[rows, cols] = x.gather(-1, index[rows, cols]).squeeze(-1) - chunk_lse
            if ent is not None:
                logp = x - chunk_lse.unsqueeze(-1)
                ent[rows, cols] = -logp.exp().mul_(logp).sum(-1)
        picked.masked_fill_(~valid, 0.0)
        ctx.save_for_backward(logits, index, valid, lse)
        ctx.temperature, ctx.limit = temperature, limit
        if ent is None:
            return picked, None
        ctx.mark_non_differentiable(ent)
        return picked, ent

    @staticmethod
    def backward(ctx, grad_picked, grad_entropy):  # type: ignore[override]
        logits, index, valid, lse = ctx.saved_tensors
        g = torch.where(valid, grad_picked, 0.0).unsqueeze(-1)

        def block(rows: slice, cols: slice) -> torch.Tensor:
            # d(x[t] - lse)/dx = onehot(t) - softmax(x), summed in autograd's order
            x = _scores(logits[rows, cols], ctx.temperature)
            out = (x - lse[rows, cols].unsqueeze(-1)).exp_().mul_(-g[rows, cols])
            out.scatter_add_(-1, index[rows, cols], g[rows, cols])
            return out.div_(ctx.temperature) if ctx.temperature != 1.0 else out

        chunks = _chunks(logits.shape, ctx.limit)
        if len(chunks) == 1:
            return block(*chunks[0]).to(logits.dtype), None, None, None, None
        grad = torch.empty_like(logits, memory_format=torch.contiguous_format)
        for rows, cols in chunks:
            grad[rows, cols] = block(rows, cols)
        return grad, None, None, None, None


def selected_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, L]`` log-probs of ``targets`` under ``log softmax(logits / T)`` and,
    with ``entropy``, the detached entropies of those distributions.

    ``logits``: ``[B, L, V]``, any float dtype, any strides; ``targets``: ``[B, L]`` token ids,
    ``-1`` where a position scores nothing (its log-prob is 0 and passes no gradient).
    Both in float32 (float64 for float64 logits). Differentiable in ``logits``; the gradient
    has the logits' dtype.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"selected_logprobs takes logits [B, L, V] and targets [B, L]; got "
            f"{tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    return _SelectedLogprobs.apply(logits, targets, float(temperature), entropy, chunk_elements)


def _next_targets(input_ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: the token each position's logits score (the next one; -1 after the last)."""
    return torch.nn.functional.pad(input_ids[:, 1:], (0, 1), value=-1)


def logprobs_from_logits(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``[B, T]``: entry ``t`` is ``log softmax(logits[:, t-1] / T)[input_ids[:, t]]``; entry 0 is 0.

    Computed in float32 at least, by :func:`selected_logprobs` (no ``[B, T, V]`` copy).
    """
    picked, _ = selected_logprobs(logits, _next_targets(input_ids), temperature)
    return torch.nn.functional.pad(picked[:, :-1], (1, 0))


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``[B, T]``: entry ``t`` is the entropy of the distribution that produced token ``t``
    (``softmax(logits[:, t-1] / T)``); entry 0 is 0. Not differentiable."""
    targets = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
    with torch.no_grad():
        _, entropy = selected_logprobs(logits, targets, temperature, entropy=True)
    assert entropy is not None
    return torch.nn.functional.pad(entropy[:, :-1], (1, 0))


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
    """Both from one forward and one pass of the head: ``(log-probs [B, T], entropy [B, T])``,
    the log-probs differentiable, the entropies detached."""
    logits = sequence_logits(model, input_ids, attention_mask)
    picked, entropy = selected_logprobs(logits, _next_targets(input_ids), temperature, entropy=True)
    assert entropy is not None
    pad = torch.nn.functional.pad
    return pad(picked[:, :-1], (1, 0)), pad(entropy[:, :-1], (1, 0))
