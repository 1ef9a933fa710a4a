"""The learner's log-prob head against the plain autograd composition it replaced.

:func:`plain_selected_logprobs` is that composition, kept as the named baseline: float32
scores, ``gather`` minus ``logsumexp``, and the entropy under ``no_grad``, each a
``[B, L, V]`` tensor autograd or the entropy holds. :func:`head_pass` runs one forward and
backward of either head (``"fused"``: :func:`forkgym.agents.learner.logprobs.selected_logprobs`) on
the same logits and reports its seconds and, on a CUDA device, the peak memory it allocated
above what was already held. On the CPU the peak is read from the process's maximum resident
size, which only a fresh process measures: ``benchmarks/logprob_head.py`` runs each variant in
one.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import torch

from forkgym.agents.learner.logprobs import at_least_float32, selected_logprobs

__all__ = ["HEADS", "head_inputs", "head_pass", "plain_selected_logprobs"]


def plain_selected_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, *, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head in plain autograd (targets must be valid ids): what ``selected_logprobs``
    computes, with autograd keeping the float32 scores and building each temporary whole."""
    scores = at_least_float32(logits)
    if temperature != 1.0:
        scores = scores / temperature
    lse = torch.logsumexp(scores, dim=-1)
    picked = scores.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    ent = None
    if entropy:
        with torch.no_grad():
            logp = scores - lse.unsqueeze(-1)
            ent = -(logp.exp() * logp).sum(-1)
    return picked, ent


HEADS = {"fused": selected_logprobs, "plain": plain_selected_logprobs}


def head_inputs(
    rows: int, positions: int, vocab: int, dtype: torch.dtype, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded logits ``[rows, positions, vocab]`` (a leaf with gradients), targets and the
    per-position weights the loss multiplies the log-probs by."""
    g = torch.Generator().manual_seed(seed)
    # drawn in the head's dtype, scaled in place: no larger temporary raises the CPU's peak
    logits = torch.randn(rows, positions, vocab, generator=g, dtype=dtype).mul_(3).to(device)
    targets = torch.randint(0, vocab, (rows, positions), generator=g).to(device)
    weights = torch.randn(rows, positions, generator=g).to(device)
    return logits.requires_grad_(True), targets, weights


def _resident_bytes() -> int:
    """This process's peak resident size so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def head_pass(
    variant: str,
    logits: torch.Tensor,
    targets: torch.Tensor,
    weights: torch.Tensor,
    temperature: float = 1.0,
) -> dict[str, Any]:
    """One forward (log-probs and entropies) and backward of the ``variant`` head: seconds,
    and ``peak_bytes`` above the memory held before it (CUDA: allocated by torch; CPU: this
    process's peak resident size, meaningful for the first pass of a fresh process)."""
    device = logits.device
    cuda = device.type == "cuda"
    logits.grad = None
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _resident_bytes()
    start = time.perf_counter()
    picked, entropy = HEADS[variant](logits, targets, temperature, entropy=True)
    (picked * weights).sum().backward()
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated(device) if cuda else _resident_bytes()) - before
    assert entropy is not None
    return {"seconds": seconds, "peak_bytes": peak, "checksum": float(logits.grad.float().sum())}
