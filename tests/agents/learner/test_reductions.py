"""Reductions (docs/design.md, S13, S14): the formulas, and gradients that ignore how a step is split."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.learner.reductions import (
    REDUCTIONS,
    Normaliser,
    build_normaliser,
    reduce_tokens,
)
from tests.agents.learner.dp_worker import (
    LOSS_CONFIGS,
    MAX_NEW_TOKENS,
    RANK_MICROBATCHES,
    make_problem,
    step_grad,
)

WORKER = Path(__file__).with_name("dp_worker.py")


def _direct(reduction: str, terms: torch.Tensor, mask: torch.Tensor, max_new: int) -> float:
    """The seed's three formulas and Dr. GRPO's constant, with Python loops."""
    rows = [
        [terms[i, t].item() for t in range(terms.size(1)) if mask[i, t]]
        for i in range(terms.size(0))
    ]
    rows = [r for r in rows if r]  # sequences of the loss: at least one action token
    n = len(rows)
    if n == 0:
        return 0.0
    if reduction == "seq_sum":
        return sum(sum(r) for r in rows) / n
    if reduction == "seq_mean_token_mean":
        return sum(sum(r) / len(r) for r in rows) / n
    if reduction == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (max_new * n)


@st.composite
def batches(draw):
    b, t = draw(st.integers(1, 8)), draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    terms = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < draw(st.floats(0.0, 1.0))
    return terms, mask


@settings(max_examples=40, deadline=None)
@given(batches(), st.sampled_from(REDUCTIONS))
def test_reductions_match_their_formulas(batch, reduction):
    terms, mask = batch
    max_new = terms.size(1) + 5
    norm = build_normaliser(reduction, mask, max_episode_tokens=max_new)
    got = reduce_tokens(terms, mask, norm).item()
    assert got == pytest.approx(_direct(reduction, terms, mask, max_new), rel=1e-9, abs=1e-12)


def test_padding_garbage_cannot_reach_the_loss_or_gradient():
    terms = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]], requires_grad=True)
    mask = torch.tensor([[True, False], [True, False]])
    for reduction in REDUCTIONS:
        norm = build_normaliser(reduction, mask, max_episode_tokens=4)
        loss = reduce_tokens(terms, mask, norm)
        (grad,) = torch.autograd.grad(loss, terms)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()
        assert torch.count_nonzero(grad[:, 1]) == 0


def test_dr_grpo_constant_uses_the_budget_not_the_padded_width():
    terms = torch.ones(3, 4)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    norm = build_normaliser("dr_grpo_constant", mask, max_episode_tokens=16)
    assert norm.denominator == 16 * 3
    wide_terms = torch.cat([terms, torch.ones(3, 12)], 1)
    wide_mask = torch.cat([mask, torch.zeros(3, 12, dtype=torch.bool)], 1)
    wide = build_normaliser("dr_grpo_constant", wide_mask, max_episode_tokens=16)
    narrow_loss = reduce_tokens(terms, mask, norm)
    assert narrow_loss == reduce_tokens(wide_terms, wide_mask, wide)
    assert narrow_loss.item() == pytest.approx(7 / 48)
    with pytest.raises(ValueError, match="max_episode_tokens"):
        build_normaliser("dr_grpo_constant", mask)


def test_fully_masked_sequences_are_not_sequences_of_the_loss():
    mask = torch.tensor([[True, True], [False, False], [True, False]])
    norm = build_normaliser("seq_sum", mask)
    assert (norm.sequences, norm.tokens) == (2.0, 3.0)


def test_normaliser_validates():
    with pytest.raises(ValueError, match="unknown reduction"):
        build_normaliser("mean", torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="gradient_sync"):
        Normaliser("token_mean", 1.0, 1.0, gradient_sync="avg")
    with pytest.raises(ValueError, match="at least one"):
        build_normaliser("token_mean", [])
    mean_sync = Normaliser("token_mean", 4.0, 10.0, world_size=4, gradient_sync="mean")
    assert mean_sync.scale == 4.0 and Normaliser("token_mean", 4.0, 10.0, world_size=4).scale == 1


def _partitions(b: int, parts: int | None, cuts: list[int]) -> list[list[int]]:
    rows = list(range(b))
    if parts is None:  # uneven: arbitrary cut points
        edges = [0, *sorted(set(c % (b + 1) for c in cuts)), b]
    else:
        edges = [round(i * b / parts) for i in range(parts + 1)]
    return [rows[lo:hi] for lo, hi in itertools.pairwise(edges) if hi > lo]


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 12),
    st.sampled_from([1, 2, 4, None]),
    st.lists(st.integers(0, 12), max_size=5),
)
def test_step_gradient_is_invariant_to_micro_batch_splits(seed, b, parts, cuts):
    """S14: any split of the step (1, 2, 4, uneven micro-batches) gives the same gradient."""
    problem = make_problem(seed, b=b)
    split = _partitions(b, parts, cuts)
    for loss_name in LOSS_CONFIGS:
        for reduction in REDUCTIONS:
            whole = step_grad(problem, loss_name, reduction, [list(range(b))])
            pieces = step_grad(problem, loss_name, reduction, split)
            torch.testing.assert_close(pieces, whole, rtol=1e-10, atol=1e-12)


def test_naive_per_micro_batch_normalisation_would_differ():
    """The bug the normaliser prevents: normalising each micro-batch by its own counts."""
    problem = make_problem(3)
    from forkgym.agents.learner.losses import get_loss

    loss_fn = get_loss("vanilla_pg", reduction="token_mean")
    w = problem["w"].clone().requires_grad_()
    for rows in ([0, 1, 2], [3, 4, 5, 6, 7, 8, 9]):
        lp = -torch.nn.functional.softplus(problem["features"][rows] @ w)
        loss, _ = loss_fn(lp, problem["old"][rows], problem["adv"][rows], problem["mask"][rows])
        loss.backward()  # normaliser=None: this micro-batch's own token count
    right = step_grad(problem, "vanilla_pg", "token_mean", [list(range(10))])
    assert not torch.allclose(w.grad, right)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_rank_gloo_step_matches_the_single_process_step(tmp_path):
    """S14 with a real process group: 2 CPU ranks, uneven rows and micro-batches per rank.

    Summed ("sum") or DDP-averaged ("mean") gradients both equal the one-process gradient.
    """
    out = tmp_path / "dp.json"
    port = _free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), "2", str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=90)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("gloo ranks did not finish")
    assert [p.returncode for p in procs] == [0, 0], logs
    results = json.loads(out.read_text())
    assert results.pop("refused_without_normaliser") == [1.0]
    assert sorted(RANK_MICROBATCHES) == [0, 1]
    problem = make_problem()
    whole = list(range(10))
    assert len(results) == 2 * len(LOSS_CONFIGS) * len(REDUCTIONS)
    for key, grad in results.items():
        _, loss_name, reduction = key.split("/")
        expected = step_grad(problem, loss_name, reduction, [whole])
        torch.testing.assert_close(torch.tensor(grad, dtype=torch.float64), expected,
                                   rtol=1e-10, atol=1e-12, msg=key)  # fmt: skip
    assert problem["mask"].size(1) < MAX_NEW_TOKENS  # the constant is not the padded width
