"""Demonstrations and supervised warm starts (and the SFT baseline).

A demonstration is an environment's gold trajectory rendered exactly as a rollout would be:
the same chat template, the same token stream, with the assistant's turns (tool calls and
the final answer, each ended by the stop token) as the only tokens in the loss. ``sft`` trains
on fresh demonstrations, from a seed stream of their own, until it has trained on ``tokens``
assistant tokens (or an ``until`` hook ends it: agents/run/warm_target.py stops a warm start
at a validation-accuracy target), then saves the model with ``save_pretrained``.

The learning rate ramps up linearly over ``warmup_steps`` steps, then follows
``lr_schedule`` (agents/learner/schedules.py: ``constant``, ``linear``, ``cosine``) over
assistant tokens: from ``lr`` down to ``lr * lr_final_ratio`` once ``lr_decay_tokens`` (the
budget ``tokens`` by default) have been trained on, and flat from there.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.envs.base import on_side

from ..generation.rollout import ChatTokens
from ..learner.schedules import lr_factor
from ..padding import pad_sequences, padding_mask
from ..seeds import task_seeds

__all__ = ["Demonstration", "StopHook", "demonstration", "every_steps", "sft", "sft_lr_factor"]

StopHook = Callable[[Any, Any, int, bool], bool]
"""``until(model, tokenizer, tokens_so_far, last)``: sft asks it after every step (``last``:
that step spent the budget) and ends training when it returns True. The hook keeps its own
cadence: :func:`every_steps` gives a plain check one, agents/run/warm_target.py a rule that
watches each step once near its target."""


def every_steps(check: Callable[[Any, Any, int], bool], n: int) -> StopHook:
    """A :data:`StopHook` that asks ``check(model, tokenizer, tokens)`` after every ``n``-th
    step and after the budget's last one, so its last call always sees the saved model."""
    if n < 1:
        raise ValueError(f"a check every n steps needs n >= 1, got {n!r}")
    calls = itertools.count(1)

    def until(model: Any, tokenizer: Any, tokens: int, last: bool) -> bool:
        due = next(calls) % n == 0 or last
        return due and check(model, tokenizer, tokens)

    return until


@dataclass
class Demonstration:
    token_ids: list[int]
    action_mask: list[int]
    status: str  # the gold trajectory's final status (correct, unless the env is broken)


def demonstration(env: Any, chat: ChatTokens, seed: int) -> Demonstration:
    """Play the env's gold actions from ``reset(seed)``; token ids as a rollout would see them."""
    obs, _ = env.reset(seed=seed)
    ids = chat.prompt(obs["messages"])
    mask = [0] * len(ids)
    messages = list(obs["messages"])
    while True:
        action = env.unwrapped.gold_action()
        turn = [*chat.encode(action), chat.stop[0]]
        ids += turn
        mask += [1] * len(turn)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return Demonstration(ids, mask, info["status"])
        added = chat.continuation(obs["messages"], len(messages) + 1)
        ids += added
        mask += [0] * len(added)
        messages = list(obs["messages"])


def sft_lr_factor(
    schedule: str,
    step: int,
    trained: int,
    decay_tokens: int,
    warmup_steps: int,
    final_ratio: float = 0.0,
) -> float:
    """The multiplier on ``lr`` for SFT step ``step`` (0-based), ``trained`` assistant tokens
    in: :func:`lr_factor`'s linear warm-up over steps, then its decay with tokens for steps
    (``decay_tokens`` the decay's length). ``constant`` gives what SFT always had: the ramp,
    then ``lr``."""
    if step < warmup_steps:
        return lr_factor(schedule, step, 1, warmup_steps)
    return lr_factor(schedule, trained, decay_tokens, 0, final_ratio)


def sft(
    model_dir: str,
    env_id: str,
    *,
    tokens: int,
    out: str | Path,
    seed: int = 0,
    lr: float = 3e-3,
    batch_size: int = 32,
    warmup_steps: int = 10,
    env_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
    log: Callable[[dict[str, float]], None] | None = None,
    until: StopHook | None = None,
    held_out: bool = True,
    lr_schedule: str = "constant",
    lr_final_ratio: float = 0.0,
    lr_decay_tokens: int | None = None,
) -> dict[str, float]:
    """Train ``model_dir`` on gold demonstrations of ``env_id`` for ``tokens`` assistant tokens.

    ``held_out`` (default): demonstrations only of problems on the train side of the env's
    content partition, so a model evaluated on the eval side (as ``forkgym train`` and
    ``forkgym eval`` do by default) was never shown an evaluated problem's answer.

    ``until`` (a :data:`StopHook`), asked after every step, may end training early (e.g.
    once validation accuracy reaches a warm-start target). ``lr_schedule``, ``lr_final_ratio``, ``lr_decay_tokens``:
    the decay after the warm-up (:func:`sft_lr_factor`; ``constant`` by default).
    """
    from ..learner.logprobs import token_logprobs
    from ..models import load_policy_model

    torch.manual_seed(seed)
    model, tokenizer = load_policy_model(model_dir, device=device)
    model.train()
    chat = ChatTokens(tokenizer)
    env = gym.make(env_id, **on_side(env_kwargs or {}, "train" if held_out else None))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99))
    trained = 0
    step = 0
    start = time.perf_counter()
    losses = []
    while trained < tokens:
        demos = [demonstration(env, chat, s) for s in task_seeds(seed, "sft", step, batch_size)]
        ids = pad_sequences([d.token_ids for d in demos], value=tokenizer.pad_token_id)
        attention = padding_mask([len(d.token_ids) for d in demos]).long()
        action = pad_sequences([d.action_mask for d in demos], dtype=torch.bool)
        ids, attention, action = ids.to(device), attention.to(device), action.to(device)
        factor = sft_lr_factor(
            lr_schedule, step, trained, lr_decay_tokens or tokens, warmup_steps, lr_final_ratio
        )
        for group in optimizer.param_groups:
            group["lr"] = lr * factor
        logprobs = token_logprobs(model, ids, attention)
        n = int(action.sum())
        loss = -(torch.where(action, logprobs, 0.0).sum() / n)  # token-mean cross-entropy
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        trained += n
        step += 1
        losses.append(float(loss.detach()))
        if log is not None:
            log({"step": step, "loss": losses[-1], "tokens": trained, "lr": lr * factor})
        if until is not None and until(model, tokenizer, trained, trained >= tokens):
            break
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        "steps": step,
        "tokens": trained,
        "final_loss": sum(tail) / len(tail),
        "seconds": time.perf_counter() - start,
        "loss_is_finite": float(all(math.isfinite(x) for x in losses)),
    }
