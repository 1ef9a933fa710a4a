"""The log-prob head (agents/learner/logprobs.py: selected_logprobs) against the plain autograd
composition it replaces: the same log-probs, entropies and gradients, chunked or not, in
float32 and bfloat16, at any temperature; and what it keeps for backward."""

from __future__ import annotations

import pytest
import torch
from lib.logprob_head import plain_selected_logprobs

from forkgym.agents.learner.logprobs import (
    entropy_from_logits,
    logprobs_from_logits,
    selected_logprobs,
)

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set

B, L, V = 3, 5, 37


def plain(logits, targets, temperature):
    """The plain autograd composition (the benchmark's baseline), with entropies."""
    return plain_selected_logprobs(logits, targets, temperature, entropy=True)


def logits_and_targets(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    wide = (torch.randn(B, L + 2, V, generator=g) * 4).to(dtype)
    logits = wide[:, 1:-1]  # not contiguous, as a model's logits[:, :-1] are
    targets = torch.randint(0, V, (B, L), generator=g)
    return wide, logits, targets


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [2**24, 2 * L * V, 3 * V, V // 2])  # one, rows, positions
def test_equals_the_plain_composition_with_gradients(dtype, temperature, chunk):
    wide, _, targets = logits_and_targets(dtype)
    weights = torch.randn(B, L, generator=torch.Generator().manual_seed(1))

    wide.requires_grad_(True)
    picked, entropy = selected_logprobs(
        wide[:, 1:-1], targets, temperature, entropy=True, chunk_elements=chunk
    )
    (picked * weights).sum().backward()
    grad = wide.grad.clone()

    wide.grad = None
    ref_picked, ref_entropy = plain(wide[:, 1:-1], targets, temperature)
    (ref_picked * weights).sum().backward()

    assert picked.dtype == entropy.dtype == torch.float32
    assert grad.dtype == dtype
    assert not entropy.requires_grad
    # the same operations on the same numbers: equal, not merely close
    torch.testing.assert_close(picked, ref_picked, rtol=0, atol=0)
    torch.testing.assert_close(entropy, ref_entropy, rtol=0, atol=0)
    torch.testing.assert_close(grad, wide.grad, rtol=0, atol=0)


def test_a_position_without_a_target_scores_zero_and_passes_no_gradient():
    _, logits, targets = logits_and_targets(torch.float32)
    logits = logits.clone().requires_grad_(True)
    targets[1, 2] = -1
    picked, _ = selected_logprobs(logits, targets)
    assert picked[1, 2] == 0.0
    picked.sum().backward()
    assert torch.count_nonzero(logits.grad[1, 2]) == 0
    assert torch.count_nonzero(logits.grad[1, 1]) == V


def test_backward_keeps_the_logits_and_one_float_per_position():
    """No float32 copy of bfloat16 logits (and no [B, L, V] temporary) waits for backward."""
    _, logits, targets = logits_and_targets(torch.bfloat16)
    logits = logits.clone().requires_grad_(True)
    picked, _ = selected_logprobs(logits, targets, 0.7, entropy=True)
    saved = picked.grad_fn.saved_tensors
    big = [t for t in saved if t.numel() >= B * L * V]
    assert len(big) == 1 and big[0].dtype == torch.bfloat16
    assert all(t.numel() <= B * L for t in saved if t is not big[0])


def test_aligned_helpers_shift_by_one_token():
    _, logits, ids = logits_and_targets(torch.float32)
    lp = logprobs_from_logits(logits, ids, 0.9)
    ent = entropy_from_logits(logits, 0.9)
    ref_lp, ref_ent = plain(logits[:, :-1], ids[:, 1:], 0.9)
    assert lp.shape == ent.shape == (B, L)
    assert torch.all(lp[:, 0] == 0) and torch.all(ent[:, 0] == 0)
    torch.testing.assert_close(lp[:, 1:], ref_lp, rtol=0, atol=0)
    torch.testing.assert_close(ent[:, 1:], ref_ent, rtol=0, atol=0)


def test_bad_shapes_say_what_is_expected():
    with pytest.raises(ValueError, match=r"logits \[B, L, V\] and targets \[B, L\]"):
        selected_logprobs(torch.zeros(4, V), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="targets"):
        selected_logprobs(torch.zeros(B, L, V), torch.zeros(B, L + 1, dtype=torch.long))
