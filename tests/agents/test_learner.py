"""The learner: one update per step, independent of the micro-batch split, DAPO's masking."""

import copy

import pytest
import torch

from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.config import TrainConfig
from forkgym.agents.episode import Episode, Group
from forkgym.agents.learner import Learner
from forkgym.agents.models import load_policy_model
from forkgym.verifiers import Outcome


def tokens_of(statuses, lengths):
    """One group of episodes with these statuses and generated lengths (ids 3..)."""
    eps = []
    for b, (status, n) in enumerate(zip(statuses, lengths, strict=True)):
        ids = [5, 6, *range(3, 3 + n)]
        eps.append(Episode(0, b, "sampled", "t", ids, [0, 0] + [1] * n, [0.0, 0.0] + [-2.0] * n, 2,
                           outcome=Outcome.from_status(status), truncated=status == "truncated"))  # fmt: skip
    return TokenBatch.from_rollouts(RolloutBatch.from_groups([Group("t", 0, eps)], len(eps)), 0)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_policy_model(tiny_model_dir)[0]


# Adam's first step is about lr * sign(gradient): a parameter whose gradient is ~1e-8 moves
# by up to lr on float rounding alone. The full forward rounds every row alike in any split;
# with prefix sharing a prompt's gradient sums over the rows in one micro-batch, so its
# rounding depends on the split (a few dozen of 1M parameters differ by ~2e-5 at lr 1e-2).
@pytest.mark.parametrize(("prefix_sharing", "atol"), [(False, 2e-6), (True, 1e-4)])
def test_the_update_does_not_depend_on_the_micro_batch_split(model, prefix_sharing, atol):
    tokens = tokens_of(["correct", "incorrect", "incorrect", "correct"], [3, 5, 2, 6])
    advantages = torch.tensor([1.0, -0.5, -0.5, 1.0])
    weights = []
    for size in (1, 3, 64):
        m = copy.deepcopy(model)
        cfg = TrainConfig(micro_batch_size=size, lr=1e-2, prefix_sharing=prefix_sharing)
        learner = Learner(m, cfg, max_new_tokens=8)
        update = learner.update(tokens, advantages, step=0)
        assert update.optimizer_steps == 1 and update.tokens_trained == 16
        weights.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert not torch.equal(weights[0], torch.cat([p.flatten() for p in model.parameters()]))
    for w in weights[1:]:
        torch.testing.assert_close(w, weights[0], rtol=0, atol=atol)


def test_masked_truncated_responses_leave_the_loss_and_are_counted(model):
    tokens = tokens_of(["correct", "truncated", "incorrect"], [3, 8, 2])
    advantages = torch.tensor([1.0, -1.0, 0.0])
    cfg = TrainConfig(mask_truncated=True, lr=1e-2)
    update = Learner(copy.deepcopy(model), cfg, max_new_tokens=8).update(tokens, advantages, 0)
    assert update.metrics["tokens"] == 5 and update.metrics["sequences"] == 2
    assert update.metrics["truncated_responses"] == 1
    assert update.metrics["truncated_tokens_masked"] == 8
    assert update.tokens_trained == 5
    plain = Learner(copy.deepcopy(model), TrainConfig(lr=1e-2), max_new_tokens=8)
    assert plain.update(tokens, advantages, 0).metrics["tokens"] == 13


def test_epochs_and_minibatches_make_that_many_optimizer_steps(model):
    tokens = tokens_of(["correct"] * 5, [2, 3, 4, 5, 6])
    cfg = TrainConfig(ppo_epochs=2, minibatches=2, micro_batch_size=2)
    update = Learner(copy.deepcopy(model), cfg, max_new_tokens=8).update(tokens, torch.ones(5), 0)
    assert update.optimizer_steps == 4 and update.metrics["tokens"] == 20  # per epoch
    assert Learner(copy.deepcopy(model), cfg, max_new_tokens=8).set_lr(0) == cfg.lr


def test_a_step_with_nothing_left_in_the_loss_does_not_move_the_weights(model):
    tokens = tokens_of(["truncated", "truncated"], [4, 5])
    m = copy.deepcopy(model)
    before = [p.detach().clone() for p in m.parameters()]
    cfg = TrainConfig(mask_truncated=True, weight_decay=0.1)
    update = Learner(m, cfg, max_new_tokens=8).update(tokens, torch.tensor([1.0, -1.0]), 0)
    assert update.optimizer_steps == 0 and update.tokens_trained == 0
    assert update.metrics["truncated_responses"] == 2
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters(), strict=True))
