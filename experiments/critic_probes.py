"""Two ways to give PPO's critic more than the policy knows, and what they explain.

Both are scored like ``critic/explained_variance`` (over action tokens, against each
episode's 0/1 reward: the λ = 1 return) on the warm policy's own rollouts, on the quick
preset's task (2-digit sums, worked answers; the policy: the default tiny model after
``--sft-tokens`` of SFT, built in ``--work`` and reused):

* ``pretrain``: a value model as PPO builds it (a copy of the policy's trunk, zero head),
  trained on graded demonstrations before it sees a rollout: gold worked answers and, for half
  of each batch, the same answer with the written sum and the boxed answer moved by a near miss
  (±1, ±2, ±3, ±9, ±10, ±11 or ±20), each graded by the environment; squared error on every
  response token, AdamW at ``--lr``, ``--steps`` batches of 64. Explained variance on
  ``--eval-steps`` steps of the policy's rollouts every 100 batches.
* ``confidence``: a small network on features of the prefix that are the policy's own
  log-probabilities of the tokens written so far (running sum and minimum, how many fell
  under 0.5, how many there are), fitted on 16 steps of rollouts and tested on 8 others.

Run: ``python experiments/critic_probes.py pretrain|confidence [--work DIR]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.agents.advantages.critic import explained_variance
from forkgym.agents.advantages.ppo import ValueModel
from forkgym.agents.batch import TokenBatch
from forkgym.agents.generation.rollout import ChatTokens
from forkgym.agents.models import init_model, load_policy_model
from forkgym.agents.padding import pad_sequences, padding_mask
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.sft import sft
from forkgym.agents.run.trainer import Trainer

ENV = "forkgym/Arithmetic-v0"
ENV_KWARGS = {"system_prompt": None, "operations": "+", "solution_style": "worked", "instruction": False}  # fmt: skip
NEAR_MISSES = (-20, -11, -10, -9, -3, -2, -1, 1, 2, 3, 9, 10, 11, 20)


def warm_policy(work: Path, sft_tokens: int) -> Path:
    warm = work / "warm"
    if not (warm / "model.safetensors").exists():
        base = init_model(work / "base")
        sft(str(base), ENV, tokens=sft_tokens, out=warm, seed=0, env_kwargs=ENV_KWARGS)
    return warm


def rollouts(warm: Path, work: Path, steps: int, seed: int) -> list[tuple[TokenBatch, torch.Tensor]]:  # fmt: skip
    """``steps`` training steps' rollouts of the policy (K = 8 x 8), rewards per row."""
    config = TrainConfig(
        model=str(warm), env=ENV, env_kwargs=ENV_KWARGS, algorithm="ppo", k=8,
        prompts_per_step=8, max_new_tokens=32, steps=steps, eval_every=0, checkpoint_every=0,
        out=str(work / f"rollouts-{seed}"), progress=False, seed=seed,
    )  # fmt: skip
    trainer = Trainer(config)
    out = []
    for step in range(steps):
        batch, _ = trainer.collector.collect(step)
        tokens = TokenBatch.from_rollouts(batch, trainer.tokenizer.pad_token_id)
        out.append((tokens, batch.rewards.reshape(-1)[tokens.index].float()))
    trainer.close()
    return out


def score(value: torch.nn.Module, data: list[tuple[TokenBatch, torch.Tensor]]) -> float:
    returns, values = [], []
    with torch.no_grad():
        for tokens, rewards in data:
            v = value(tokens.input_ids, tokens.attention_mask)
            mask = tokens.action_mask
            returns.append(rewards[:, None].expand_as(mask)[mask])
            values.append(v[mask])
    return explained_variance(torch.cat(returns).double(), torch.cat(values).double())


def pretrain(args: argparse.Namespace, warm: Path) -> None:
    model, tokenizer = load_policy_model(warm)
    chat = ChatTokens(tokenizer)
    env = gym.make(ENV, **ENV_KWARGS)
    rng = random.Random(args.seed)

    def graded(seed: int) -> tuple[list[int], list[int], float]:
        obs, _ = env.reset(seed=seed)
        ids = chat.prompt(obs["messages"])
        action = env.unwrapped.gold_action()
        if rng.random() < 0.5:
            answer = str(env.unwrapped.task.answer)
            action = action.replace(answer, str(max(int(answer) + rng.choice(NEAR_MISSES), 0)))
        turn = [*chat.encode(action), chat.stop[0]]
        info = env.step(action)[4]
        return ids + turn, [0] * len(ids) + [1] * len(turn), float(info["status"] == "correct")

    data = rollouts(warm, args.work, args.eval_steps, args.seed)
    accuracy = float(torch.cat([r for _, r in data]).mean())
    print(f"pretrain: the policy's rollouts: {sum(len(t) for t, _ in data)} responses, {accuracy:.3f} correct")  # fmt: skip
    torch.manual_seed(args.seed)
    value = ValueModel(model)
    optimizer = torch.optim.AdamW(value.parameters(), lr=args.lr, betas=(0.9, 0.99))
    print(f"batch 0: explained variance {score(value, data):+.3f}")
    t0, next_seed = time.perf_counter(), 10**6
    for batch in range(1, args.steps + 1):
        rows = [graded(next_seed + i) for i in range(64)]
        next_seed += 64
        ids = pad_sequences([r[0] for r in rows])
        mask = padding_mask([len(r[0]) for r in rows]).long()
        action = pad_sequences([r[1] for r in rows], dtype=torch.bool)
        target = torch.tensor([r[2] for r in rows])[:, None].expand(action.shape)
        loss = ((value(ids, mask) - target) ** 2)[action].mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(value.parameters(), 1.0)
        optimizer.step()
        if batch % 100 == 0:
            print(
                f"batch {batch} ({time.perf_counter() - t0:.0f} s): training loss {loss.item():.4f}, "
                f"explained variance on the policy's rollouts {score(value, data):+.3f}"
            )


def confidence(args: argparse.Namespace, warm: Path) -> None:
    data = rollouts(warm, args.work, 24, args.seed)
    features, targets, steps = [], [], []
    for step, (tokens, rewards) in enumerate(data):
        mask = tokens.action_mask
        logprobs = torch.where(mask, tokens.old_logprobs, 0.0)
        before = torch.nn.functional.pad(logprobs, (1, 0))[:, :-1]  # tokens before t
        written = torch.nn.functional.pad(mask, (1, 0))[:, :-1]
        columns = [
            before.cumsum(1),
            torch.where(written, before, 0.0).cummin(1).values,
            ((before < -0.693) & written).float().cumsum(1),
            written.float().cumsum(1),
        ]
        features.append(torch.stack(columns, -1)[mask])
        targets.append(rewards[:, None].expand_as(mask)[mask])
        steps.append(torch.full((int(mask.sum()),), step))
    x, y, step = torch.cat(features), torch.cat(targets), torch.cat(steps)
    train, test = step < 16, step >= 16
    x = (x - x[train].mean(0)) / x[train].std(0).clamp(min=1e-6)
    torch.manual_seed(args.seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(2000):
        loss = ((net(x[train]).squeeze(-1) - y[train]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        fit = explained_variance(y[train].double(), net(x[train]).squeeze(-1).double())
        held = explained_variance(y[test].double(), net(x[test]).squeeze(-1).double())
    print(f"confidence: {len(y):,} action tokens, {float(y.mean()):.3f} of them in correct responses")  # fmt: skip
    print(f"explained variance: {fit:+.3f} on the 16 steps fitted, {held:+.3f} on the 8 held out")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["pretrain", "confidence"])
    parser.add_argument("--work", type=Path, default=Path("runs/critic-probes"))
    parser.add_argument("--sft-tokens", type=int, default=400_000)
    parser.add_argument("--steps", type=int, default=800, help="pretrain: batches of 64")
    parser.add_argument("--eval-steps", type=int, default=6, help="pretrain: rollout steps scored")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    warm = warm_policy(args.work, args.sft_tokens)
    (pretrain if args.probe == "pretrain" else confidence)(args, warm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
