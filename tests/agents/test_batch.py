"""RolloutBatch and TokenBatch: the grids are the episodes' values; micro-batches are exact."""

import math

import pytest
import torch

from forkgym.agents.advantages.estimators import get_estimator
from forkgym.agents.batch import (
    RolloutBatch,
    RolloutCost,
    TokenBatch,
    rewards_from_outcomes,
    valid_from_statuses,
)
from forkgym.agents.episode import Episode, Group
from forkgym.verifiers import Outcome, Status


def episode(g, b, status, prompt=(5, 6), generated=(7, 8), kind="sampled", logprob=-0.5):
    ids = [*prompt, *generated]
    return Episode(
        group=g, branch=b, kind=kind, task_id=f"t{g}", token_ids=ids,
        action_mask=[0] * len(prompt) + [1] * len(generated),
        logprobs=[0.0] * len(prompt) + [logprob] * len(generated), prompt_len=len(prompt),
        outcome=Outcome.from_status(status), truncated=status == "truncated",
    )  # fmt: skip


def batch(greedy=True) -> RolloutBatch:
    statuses = [["correct", "incorrect", "timeout"], ["truncated", "error", "correct"]]
    groups = []
    for g, row in enumerate(statuses):
        sampled = [episode(g, b, s, generated=range(10, 11 + b + g)) for b, s in enumerate(row)]
        greedy_ep = episode(g, 3, "invalid" if g else "correct", kind="greedy") if greedy else None
        groups.append(Group(f"t{g}", g, sampled, greedy_ep, span_s=0.5, greedy_diverged=None))
    return RolloutBatch.from_groups(groups, 3, RolloutCost(tokens_generated=17))


def test_the_grids_hold_what_the_episodes_say():
    b = batch()
    assert b.valid.tolist() == [[True, True, False], [True, False, True]]
    assert torch.equal(torch.nan_to_num(b.rewards, nan=-9), torch.tensor([[1.0, 0, -9], [0, -9, 1]], dtype=torch.float64))  # fmt: skip
    assert math.isnan(b.rewards[0, 2])
    assert b.correct.tolist() == [[True, False, False], [False, False, True]]
    assert b.truncated.tolist() == [[False, False, False], [True, False, False]]
    assert b.lengths.tolist() == [[1, 2, 3], [2, 3, 4]]
    assert b.greedy_rewards.tolist() == [1.0, 0.0] and b.greedy_valid.all()
    assert b.greedy_correct.tolist() == [True, False] and b.greedy_lengths.tolist() == [2, 2]
    counts = b.status_counts()
    assert counts[Status.CORRECT] == 2 and counts[Status.TIMEOUT] == 1 and sum(counts.values()) == 6
    assert b.greedy_diverged.tolist() == [-1, -1]
    plain = batch(greedy=False)
    assert plain.greedy_rewards is None and plain.greedy_valid is None


def test_select_head_and_cat_keep_rows_together():
    b = batch()
    second = b.select(torch.tensor([False, True]))
    assert second.prompts == 1 and second.groups[0].task_id == "t1"
    assert second.lengths.tolist() == [[2, 3, 4]] and second.greedy_lengths.tolist() == [2]
    joined = RolloutBatch.cat([second, b.select(torch.tensor([0]))], RolloutCost(turns=3))
    assert [g.task_id for g in joined.groups] == ["t1", "t0"] and joined.cost.turns == 3
    assert joined.lengths.tolist() == [[2, 3, 4], [1, 2, 3]]


def test_a_batch_survives_json_exactly():
    """What an asynchronous run's checkpoint keeps of the batches generated ahead."""
    import json
    from dataclasses import fields

    b = batch()
    b.groups[1].sampled[0].weight_version = 3
    b.groups[0].sampled[1].logprobs[-1] = -1 / 3  # a float that must round-trip exactly
    back = RolloutBatch.from_dict(json.loads(json.dumps(b.to_dict())))
    assert back.groups == b.groups and back.cost == b.cost and back.k == b.k
    for f in fields(b):
        value = getattr(b, f.name)
        if isinstance(value, torch.Tensor):
            assert torch.equal(torch.nan_to_num(value), torch.nan_to_num(getattr(back, f.name)))


def test_mismatched_groups_are_refused():
    groups = [Group("t", 0, [episode(0, 0, "correct")])]
    with pytest.raises(ValueError, match="expected 2 sampled"):
        RolloutBatch.from_groups(groups, 2)


def test_token_batch_rows_are_the_valid_episodes_and_micro_batches_are_exact():
    b = batch()
    tokens = TokenBatch.from_rollouts(b, pad_id=0)
    assert tokens.index.tolist() == [0, 1, 3, 5]  # row-major, infrastructure failures left out
    valid = [ep for ep in b.sampled if ep.valid]
    assert tokens.lengths.tolist() == [len(ep.token_ids) for ep in valid]
    assert tokens.generated.tolist() == [ep.generated_tokens for ep in valid]
    assert tokens.truncated.tolist() == [False, False, True, False]
    adv = torch.tensor([1.0, -1.0, 0.5, 0.25])
    micros = tokens.micro_batches([3, 0, 2], adv, size=2)
    assert [mb.rows.tolist() for mb in micros] == [[3, 0], [2]]
    for mb in micros:  # what padding these episodes alone would give
        eps = [valid[i] for i in mb.rows.tolist()]
        width = max(len(ep.token_ids) for ep in eps)
        assert mb.input_ids.shape == (len(eps), width)
        for row, ep in enumerate(eps):
            n = len(ep.token_ids)
            assert mb.input_ids[row, :n].tolist() == ep.token_ids
            assert mb.input_ids[row, n:].eq(0).all() and mb.attention_mask[row].sum() == n
            assert mb.action_mask[row, :n].tolist() == [bool(x) for x in ep.action_mask]
            assert mb.old_logprobs[row, :n].tolist() == ep.logprobs
        assert mb.advantages.tolist() == adv[mb.rows].tolist()
    token_level = torch.arange(4 * tokens.input_ids.size(1), dtype=torch.float32).reshape(4, -1)
    mb = tokens.micro_batches([1], token_level, size=8)[0]
    assert torch.equal(mb.advantages, token_level[1:2, : mb.input_ids.size(1)])


def test_a_batch_without_valid_rows_has_no_rows():
    groups = [Group("t", 0, [episode(0, b, "error") for b in range(2)])]
    tokens = TokenBatch.from_rollouts(RolloutBatch.from_groups(groups, 2), pad_id=0)
    assert len(tokens) == 0 and tokens.input_ids.shape == (0, 0)


def test_valid_and_rewards_from_outcomes():
    grid = [
        [Outcome.from_status("correct"), Outcome.from_status("timeout")],
        [Outcome.from_status("invalid"), Outcome.from_status("error")],
    ]
    rewards, valid = rewards_from_outcomes(grid)
    assert valid.tolist() == [[True, False], [True, False]]
    assert rewards[0, 0] == 1.0 and rewards[1, 0] == 0.0 and torch.isnan(rewards[:, 1]).all()
    assert valid_from_statuses([[Status.TRUNCATED, "timeout"]]).tolist() == [[True, False]]
    adv, _ = get_estimator("reinforce")(rewards, valid)
    assert adv.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="rectangular"):
        valid_from_statuses([["correct"], ["correct", "error"]])
