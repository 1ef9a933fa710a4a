"""PPO with a learned critic behind the algorithm seam."""

import pytest
import torch

from forkgym.agents.advantages.algorithms import build_algorithm
from forkgym.agents.advantages.ppo import ValueModel
from forkgym.agents.batch import RolloutBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from forkgym.verifiers import Outcome
from tests.agents.learner.test_learner import tokens_of
from tests.agents.premises import SIGNED_REWARDS
from tests.agents.run.test_trainer import comparable, config

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_policy_model(tiny_model_dir)[0]


def test_a_value_is_read_before_its_token(model):
    value = ValueModel(model)
    torch.nn.init.normal_(value.head.weight, std=1.0, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    other = ids.clone()
    other[0, 4] = 20
    mask = torch.ones_like(ids)
    a, b = value(ids, mask), value(other, mask)
    assert a[0, 0] == 0 and torch.equal(a[:, :5], b[:, :5])  # V[t] sees tokens before t only
    assert not torch.equal(a[:, 5:], b[:, 5:])


def test_the_first_advantages_are_the_returns_and_the_critic_learns(model):
    cfg = TrainConfig(algorithm="ppo", lr=1e-3, k=3)
    ppo = build_algorithm(cfg, model)
    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    batch = _batch_for(tokens)
    adv = ppo.advantages(batch, tokens)
    mask = tokens.action_mask
    expected = torch.tensor([1.0, 0.0, 1.0])[:, None].expand_as(mask)
    assert torch.equal(adv.rows[mask], expected[mask]) and adv.rows[~mask].eq(0).all()
    assert adv.grid.tolist() == [[1.0, 0.0, 1.0]]
    losses = []
    for step in range(6):
        ppo.advantages(batch, tokens)
        losses.append(ppo.update(tokens, step)["critic/value_loss"])
    assert losses[-1] < losses[0] / 2


def test_normalised_advantages_are_the_plain_ones_whitened_over_action_tokens(model):
    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    batch = _batch_for(tokens)
    plain = build_algorithm(TrainConfig(algorithm="ppo", k=3), model).advantages(batch, tokens)
    cfg = TrainConfig(algorithm="ppo", k=3, algorithm_kwargs={"normalize_advantages": True})
    adv = build_algorithm(cfg, model).advantages(batch, tokens)
    mask = tokens.action_mask
    picked = plain.rows[mask].double()
    expected = (picked - picked.mean()) / picked.std(unbiased=False)
    assert torch.allclose(adv.rows[mask].double(), expected, atol=1e-6)
    assert adv.rows[~mask].eq(0).all()
    assert abs(float(adv.rows[mask].mean())) < 1e-6  # a batch-wide baseline


def _batch_for(tokens):
    """The RolloutBatch the rows of tokens_of came from (one group, all valid)."""
    eps = []
    for b in range(len(tokens)):
        n = int(tokens.lengths[b])
        status = "correct" if b != 1 else "incorrect"
        ids = tokens.input_ids[b, :n].tolist()
        mask = tokens.action_mask[b, :n].int().tolist()
        eps.append(Episode(0, b, "sampled", "t", ids, mask, [0.0] * n, 2, outcome=Outcome.from_status(status)))  # fmt: skip
    return RolloutBatch.from_groups([Group("t", 0, eps)], len(eps))


@pytest.mark.parametrize(
    "options",
    [
        {"lam": 0.95, "group_centering": "loo"},
        {"lam": 0.9, "value_lam": 1.0, "value_model": "shared", "value_warmup_steps": 1},
    ],
    ids=["separate-hybrid", "shared-warmup"],
)
def test_ppo_trains_checkpoints_and_resumes_exactly(tmp_path, warm_model_dir, options):
    from tests.conftest import WARM_ENV_KWARGS

    # returns never 0 (SIGNED_REWARDS), so the critic has something to fit on any CPU
    ppo = dict(
        algorithm="ppo", algorithm_kwargs=options, max_new_tokens=12, eval_every=0,
        env_kwargs={**WARM_ENV_KWARGS, "rewards": SIGNED_REWARDS}, checkpoint_every=2,
    )  # fmt: skip
    Trainer(config(tmp_path, warm_model_dir, "full", steps=3, **ppo)).run()
    Trainer(config(tmp_path, warm_model_dir, "part", steps=2, **ppo)).run()
    resumed = Trainer(config(tmp_path, warm_model_dir, "part", steps=3, **ppo), resume=True)
    resumed.run()
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert comparable(full) == comparable(part)
    last = full[-1]
    keys = ["critic/value_loss", "critic/explained_variance", "critic/value_clip_frac",
            "critic/grad_norm", "loss/loss"]  # fmt: skip
    if "group_centering" in options:
        keys.append("critic/centering_baseline_abs_mean")
    for key in keys:
        assert key in last, key
    saved = torch.load(next((tmp_path / "part" / "checkpoints").glob("step_*")) / "algorithm.pt")
    if options.get("value_model") == "shared":  # the trunk is the policy's, saved with it
        assert set(saved["value"]) == {"head.weight", "head.bias"}
    else:
        assert any(k.startswith("trunk.") for k in saved["value"])
    assert last["critic/value_mean"] != 0  # the critic moved off its zero start
    # the ceiling benchmark reads the last checkpoint's critic as the run left it
    from forkgym.bench.ceiling import critic_from_checkpoint

    final = sorted((tmp_path / "part" / "checkpoints").glob("step_*"))[-1]
    ids = [5, 6, 7, 8, 9, 10, 11]
    with torch.no_grad():
        live = resumed.algorithm.value(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))  # fmt: skip
    assert critic_from_checkpoint(final)(ids) == live[0].tolist() and any(live[0, 1:] != 0)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"algorithm": "ppo", "loss": "gspo"}, "loss 'gspo' needs one advantage per response"),
        ({"algorithm": "ppo", "algorithm_kwargs": {"lamda": 0.9}}, "algorithm_kwargs"),
        ({"algorithm": "critic_free", "algorithm_kwargs": {"lam": 0.9}}, "algorithm_kwargs"),
        ({"algorithm": "a2c"}, "algorithm='a2c' is not one of"),
        ({"backend": "tgi"}, "backend='tgi' is not one of"),
        ({"estimator_kwargs": {"eps": -1}, "estimator": "grpo"}, "eps must be >= 0"),
        ({"loss_kwargs": {"eps_low": 2}}, "loss_kwargs"),
        ({"reduction": "mean"}, "reduction='mean'"),
    ],
)
def test_algorithm_backend_and_options_are_validated(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**values)


def _randomised(ppo, seed=0):
    """Give the value head random weights, so that values (and GAE's lambda) matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        ppo.value.head.weight.copy_(torch.randn(ppo.value.head.weight.shape, generator=g) * 0.3)
        ppo.value.head.bias.fill_(0.1)
    return ppo


def test_the_critic_targets_take_their_own_lambda(model):
    from forkgym.agents.advantages.critic import gae, terminal_rewards

    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    batch = _batch_for(tokens)
    cfg = TrainConfig(algorithm="ppo", k=3, algorithm_kwargs={"lam": 0.5, "value_lam": 1.0})
    ppo = _randomised(build_algorithm(cfg, model))
    adv = ppo.advantages(batch, tokens).rows
    values, mask = ppo._old_values, tokens.action_mask
    rewards = terminal_rewards(torch.tensor([1.0, 0.0, 1.0]), mask)
    want_adv, _ = gae(rewards, values, mask, lam=0.5)
    _, want_returns = gae(rewards, values, mask, lam=1.0)
    torch.testing.assert_close(adv, want_adv)
    torch.testing.assert_close(ppo._returns, want_returns)
    # lam = 1 targets are the plain terminal returns on every action token
    torch.testing.assert_close(ppo._returns[mask], rewards.sum(1, keepdim=True).expand_as(mask)[mask])  # fmt: skip
    assert not torch.allclose(adv[mask] + values[mask], ppo._returns[mask])  # lam=0.5 differs


@pytest.mark.parametrize("value_lam", [0.5, 1.0])
def test_the_critic_is_also_read_against_the_monte_carlo_returns(model, value_lam):
    """Bootstrapped targets (value_lam < 1) hold the critic's own values, so its explained
    variance of them flatters it; the returns' figure is the one a ceiling compares."""
    from forkgym.agents.advantages.critic import explained_variance

    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    cfg = TrainConfig(algorithm="ppo", k=3, algorithm_kwargs={"lam": 0.9, "value_lam": value_lam})  # fmt: skip
    ppo = _randomised(build_algorithm(cfg, model))
    metrics = ppo.advantages(_batch_for(tokens), tokens).metrics
    mask = tokens.action_mask
    rewards = torch.tensor([1.0, 0.0, 1.0])[:, None].expand_as(mask)[mask].double()
    values = ppo._old_values[mask].double()
    assert metrics["critic/explained_variance_return"] == pytest.approx(explained_variance(rewards, values))  # fmt: skip
    targets = metrics["critic/explained_variance"]
    if value_lam == 1.0:
        assert targets == metrics["critic/explained_variance_return"]
    else:
        assert targets != pytest.approx(metrics["critic/explained_variance_return"])


def test_a_shared_value_head_trains_the_head_and_never_the_policy(model):
    cfg = TrainConfig(algorithm="ppo", lr=1e-2, k=3, algorithm_kwargs={"value_model": "shared"})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ppo = build_algorithm(cfg, model)
    assert set(ppo.value.state_dict()) == {"head.weight", "head.bias"}
    assert sum(p.numel() for p in ppo.value.parameters()) == model.config.hidden_size + 1
    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    batch = _batch_for(tokens)
    losses = []
    for step in range(8):
        ppo.advantages(batch, tokens)
        losses.append(ppo.update(tokens, step)["critic/value_loss"])
    assert losses[-1] < losses[0] / 2
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_value_warm_up_steps_move_the_critic_only_and_count_their_tokens(tmp_path, warm_model_dir):
    from tests.conftest import WARM_ENV_KWARGS

    cfg = config(
        tmp_path, warm_model_dir, "warm", steps=3, algorithm="ppo",
        env_kwargs={**WARM_ENV_KWARGS, "rewards": SIGNED_REWARDS},
        algorithm_kwargs={"value_warmup_steps": 2}, eval_every=0, max_new_tokens=12,
    )  # fmt: skip
    trainer = Trainer(cfg)
    start = [p.detach().clone() for p in trainer.model.parameters()]
    critic_start = [p.detach().clone() for p in trainer.algorithm.value.parameters()]
    trainer.train_step()
    trainer.step += 1
    first = trainer.train_step()
    trainer.step += 1
    assert all(torch.equal(a, b) for a, b in zip(start, trainer.model.parameters(), strict=True))
    assert not all(
        torch.equal(a, b)
        for a, b in zip(critic_start, trainer.algorithm.value.parameters(), strict=True)
    )
    assert first["policy_updated"] == 0 and first["tokens_trained"] == 0
    assert first["tokens_generated"] > 0 and "critic/value_loss" in first
    third = trainer.train_step()
    assert third["policy_updated"] == 1 and third["tokens_trained"] > 0
    trainer.log.close()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"value_lam": 1.5}, "value_lam must be in [0, 1]"),
        ({"value_model": "twin"}, "value_model must be one of"),
        ({"value_warmup_steps": 100}, "leaves no step for the policy"),
    ],
)
def test_new_ppo_options_are_checked(options, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TrainConfig(algorithm="ppo", steps=10, algorithm_kwargs=options)
