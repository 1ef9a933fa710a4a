"""Monte Carlo values of states inside episodes, from exact forks (agents/generation/fork_values.py)."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.fork_values import ForkValues, state_positions
from forkgym.agents.generation.rollout import Rollouts
from forkgym.agents.models import load_policy_model
from tests.conftest import STEPS_KWARGS, WARM_ENV_KWARGS

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


def test_states_are_turn_starts_then_chunks_and_line_ends():
    #       prompt  turn 1 (5 tokens)  tool  turn 2 (3 tokens)
    mask = [0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1]
    assert state_positions(mask) == [2, 9]
    assert state_positions(mask, chunk=2) == [2, 4, 6, 9, 11]
    lines = [False] * len(mask)
    lines[3] = True  # token 3 ends a line: a state before token 4
    lines[6] = True  # the turn's last token: the next state is the next turn's start anyway
    assert state_positions(mask, line_ends=lines) == [2, 4, 9]
    assert state_positions(mask, chunk=3, line_ends=lines) == [2, 4, 5, 9]
    assert state_positions([0, 0, 0]) == []


def _rollouts(model_dir, env_id, env_kwargs, *, k, max_new_tokens, seed=0):
    model, tokenizer = load_policy_model(str(model_dir))
    policy = HFPolicy(model, tokenizer, seed=seed)
    return Rollouts(
        lambda: gym.make(env_id, **env_kwargs), policy, tokenizer,
        k=k, max_new_tokens=max_new_tokens, seed=seed,
    )  # fmt: skip


def _enumerated(rollouts, task_seed, episode, pos, tau=1e-4):
    """``(V, dropped)`` of the state before token ``pos`` (inside the first turn), by walking
    every continuation whose probability is at least ``tau``: a stop token grades the turn's
    text, the turn's last token budget truncates it. ``dropped`` is the probability of the
    continuations cut off, so the exact value is within ``dropped`` of ``V`` (rewards in
    [0, 1])."""
    model, tok, stops = rollouts.policy.model, rollouts.tokenizer, set(rollouts.stop)
    env = rollouts.make_env()
    env.reset(seed=task_seed)

    def reward(content, truncate=False):
        fork = env.unwrapped.fork()
        out = fork.truncate("max_tokens") if truncate else fork.step(tok.decode(content, skip_special_tokens=False))  # fmt: skip
        return float(out[-1]["outcome"].reward)

    start = episode.prompt_len

    def walk(ids, mass, budget):
        with torch.no_grad():
            probs = torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
        value, dropped = 0.0, mass * float(probs[probs < tau].sum())
        for t in (probs >= tau).nonzero().squeeze(1).tolist():
            p = mass * float(probs[t])
            if t in stops:
                value += p * reward(ids[start:])
            elif budget == 1:
                value += p * reward(None, truncate=True)
            else:
                v, d = walk([*ids, t], p, budget - 1)
                value, dropped = value + v, dropped + d
        return value, dropped

    return walk(list(episode.token_ids[:pos]), 1.0, rollouts.max_new_tokens - (pos - start))


def test_monte_carlo_values_converge_to_the_enumerated_ones(warm_model_dir):
    """The state 4 tokens before a turn's budget runs out (the answer's digit, its brace and
    the stop token still to come) has a value that can be enumerated over the vocabulary;
    400 continuations land within 4 standard errors of it (the seed fixes the draw)."""
    rollouts = _rollouts(warm_model_dir, "forkgym/Arithmetic-v0", WARM_ENV_KWARGS, k=1, max_new_tokens=12)  # fmt: skip
    batch = rollouts.collect([11, 12, 13, 14], "train", 0)
    spent = ForkValues(rollouts=400, chunk=8)(rollouts, batch, step=0)
    checked = []
    for group in batch.groups:
        episode = group.sampled[0]
        late = episode.prompt_len + 8
        assert episode.value_positions[0] == episode.prompt_len
        if late not in episode.value_positions:
            continue
        mc = episode.values[episode.value_positions.index(late)]
        exact, dropped = _enumerated(rollouts, group.task_seed, episode, late)
        se = math.sqrt(max(exact * (1 - exact), 1e-4) / 400)
        assert abs(mc - exact) <= 4 * se + dropped, (mc, exact, se, dropped)
        checked.append(exact)
    assert any(0.05 < v < 0.95 for v in checked), checked  # a value the test can miss
    assert spent.value_continuations == 400 * sum(len(ep.values) for ep in batch.sampled)
    assert 0 < spent.value_tokens <= 12 * spent.value_continuations
    assert spent.tokens_generated == spent.value_tokens


def test_a_state_shared_by_branches_is_valued_once_and_values_repeat(warm_model_dir):
    rollouts = _rollouts(warm_model_dir, "forkgym/Arithmetic-v0", WARM_ENV_KWARGS, k=4, max_new_tokens=8)  # fmt: skip
    batch = rollouts.collect([5], "train", 3)
    values = ForkValues(rollouts=3)
    spent = values(rollouts, batch, step=3)
    # one state per episode (the prompt, turns only), shared by the 4 branches: valued once
    assert spent.value_continuations == 3
    first = [(ep.value_positions, ep.values) for ep in batch.sampled]
    assert len({tuple(v) for _, v in first}) == 1 and len(first[0][1]) == 1
    values(rollouts, batch, step=3)  # a pure function of the run seed, step and state
    assert [(ep.value_positions, ep.values) for ep in batch.sampled] == first


def test_multi_turn_states_are_turn_starts_valued_on_forks(steps_model_dir):
    rollouts = _rollouts(steps_model_dir, "forkgym/CheckedSteps-v0", STEPS_KWARGS, k=2, max_new_tokens=48)  # fmt: skip
    batch = rollouts.collect([1, 2], "train", 0)
    spent = ForkValues(rollouts=2)(rollouts, batch, step=0)
    turns = 0
    for episode in batch.sampled:
        assert episode.value_positions == state_positions(episode.action_mask)
        assert all(0.0 <= v <= 1.0 for v in episode.values)
        turns += len(episode.value_positions)
    assert max(len(ep.value_positions) for ep in batch.sampled) >= 2  # several turns
    assert spent.value_continuations <= 2 * turns and spent.value_tokens > 0
