"""The learner: one update per step, independent of the micro-batch split, DAPO's masking."""

import copy

import pytest
import torch

from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.learner.stage import Learner
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.config import TrainConfig
from forkgym.verifiers import Outcome

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


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


# The property is exact in real arithmetic: every split sums the same per-token terms under one
# normaliser, only grouped differently. It is checked on the gradients that reach the optimizer
# (Adam's first step is about lr * sign(gradient), so a weight whose gradient is at rounding
# level moves by up to lr on rounding alone: weights after the step say nothing about the
# split), in float64, with bounds derived from each dtype's epsilon, never fitted to a CPU:
# * the full forward computes every row alike in any split, and a regrouped sum of n terms
#   moves by at most about n * eps * (sum of their magnitudes); n <= 2**10 covers the widest
#   reduction here (the 1,024-token vocabulary) and the largest gradient stands for the sum of
#   magnitudes: 2**10 * eps64 * max|g| (measured: under 1e-15 relative);
# * sharing a prompt's forward changes the attention's shapes with the split (padded suffixes,
#   a cached prefix), and even in float64 its gradients then agree only to float32's epsilon
#   (measured: ~7e-8 relative, the same with eager attention and with float64 rotary tables):
#   16 * eps32 * max|g|. A genuine dependence on the split (a per-micro-batch normaliser, a
#   row counted twice) moves gradients by a sizeable fraction of max|g|: both bounds catch it.
@pytest.mark.parametrize(
    ("prefix_sharing", "bound"),
    [(False, 2**10 * torch.finfo(torch.float64).eps), (True, 16 * torch.finfo(torch.float32).eps)],
)
def test_the_update_does_not_depend_on_the_micro_batch_split(model, prefix_sharing, bound):
    tokens = tokens_of(["correct", "incorrect", "incorrect", "correct"], [3, 5, 2, 6])
    advantages = torch.tensor([1.0, -0.5, -0.5, 1.0])
    start = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    grads = []
    for size in (1, 3, 64):
        m = copy.deepcopy(model).double()
        cfg = TrainConfig(micro_batch_size=size, lr=1e-2, prefix_sharing=prefix_sharing)
        learner = Learner(m, cfg, max_episode_tokens=8)
        seen = []
        learner.optimizer.register_step_pre_hook(
            lambda *_, m=m, seen=seen: seen.append(
                torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
            )
        )
        update = learner.update(tokens, advantages, step=0)
        assert update.optimizer_steps == 1 and update.tokens_trained == 16 and len(seen) == 1
        assert not torch.equal(torch.cat([p.detach().flatten() for p in m.parameters()]), start)
        grads.append(seen[0])
    scale = float(grads[0].abs().max())
    assert scale > 0
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], rtol=0, atol=bound * scale)


def test_masked_truncated_responses_leave_the_loss_and_are_counted(model):
    tokens = tokens_of(["correct", "truncated", "incorrect"], [3, 8, 2])
    advantages = torch.tensor([1.0, -1.0, 0.0])
    cfg = TrainConfig(mask_truncated=True, lr=1e-2)
    update = Learner(copy.deepcopy(model), cfg, max_episode_tokens=8).update(tokens, advantages, 0)
    assert update.metrics["tokens"] == 5 and update.metrics["sequences"] == 2
    assert update.metrics["truncated_responses"] == 1
    assert update.metrics["truncated_tokens_masked"] == 8
    assert update.tokens_trained == 5
    plain = Learner(copy.deepcopy(model), TrainConfig(lr=1e-2), max_episode_tokens=8)
    assert plain.update(tokens, advantages, 0).metrics["tokens"] == 13


def test_epochs_and_minibatches_make_that_many_optimizer_steps(model):
    tokens = tokens_of(["correct"] * 5, [2, 3, 4, 5, 6])
    cfg = TrainConfig(ppo_epochs=2, minibatches=2, micro_batch_size=2)
    update = Learner(copy.deepcopy(model), cfg, max_episode_tokens=8).update(
        tokens, torch.ones(5), 0
    )
    assert update.optimizer_steps == 4 and update.metrics["tokens"] == 20  # per epoch
    assert Learner(copy.deepcopy(model), cfg, max_episode_tokens=8).set_lr(0) == cfg.lr


def test_a_step_with_nothing_left_in_the_loss_does_not_move_the_weights(model):
    tokens = tokens_of(["truncated", "truncated"], [4, 5])
    m = copy.deepcopy(model)
    before = [p.detach().clone() for p in m.parameters()]
    cfg = TrainConfig(mask_truncated=True, weight_decay=0.1)
    update = Learner(m, cfg, max_episode_tokens=8).update(tokens, torch.tensor([1.0, -1.0]), 0)
    assert update.optimizer_steps == 0 and update.tokens_trained == 0
    assert update.metrics["truncated_responses"] == 2
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters(), strict=True))
