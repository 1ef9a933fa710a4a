"""GiGPO: turn-level credit from exactly matched anchor states, with no critic and no extra rollouts.

``algorithm: gigpo``. The fourth way to an advantage, beside a group baseline
(``critic_free``), a learned critic (``ppo``) and Monte Carlo values from forks (``vine``).
Group-in-Group Policy Optimization (Feng et al., arXiv 2505.10978) adds two relative
advantages:

* the episode level: the configured estimator over the group's K rewards, as
  ``critic_free`` gives it (``estimator: grpo``: ``A^E_i = (R_i - mean_j R_j) / std_j R_j``);
* the step level: the turns of the group's K branches that start from the same environment
  state form an *anchor group*; the turn ``t`` of branch ``i`` gets
  ``A^S_{i,t} = G_{i,t} - mean over its anchor group of G``, divided by the anchor group's
  std with ``step_std: true``, where ``G_{i,t} = sum_{u >= t} gamma^(u - t) r_{i,u}`` is the
  return that follows it. forkgym's envs pay their one reward at the end of an episode of
  ``T_i`` turns, so ``G_{i,t} = gamma^(T_i - 1 - t) R_i``. A turn alone in its anchor group
  gets 0.

Every action token of turn ``t`` gets ``A^E_i + omega * A^S_{i,t}`` (``omega`` 1 in the
paper), so the loss must take per-token advantages (ppo_clip, sapo, vanilla_pg and the
others whose ``token_advantages`` is true). With ``omega = 0`` it is the episode estimator
alone.

verl-agent, the paper's code, matches anchor states by the observation's text. forkgym
matches them by :meth:`~forkgym.envs.base.TextEnv.state_key`, a digest of everything that
decides the rest of the episode (task, turn, tool state, RNG) and nothing of the wording: two
branches that said the same thing in other words share a state, and two the env answered with
the same text but left in different states (CheckedSteps without feedback: a right and a wrong
report both read "Recorded") do not. The rollouts record both keys; the metrics say how much
grouping happened and how often matching by text would have mixed states:

* ``gigpo/anchor_fraction``: the fraction of turns in an anchor group of size >= 2;
* ``gigpo/anchor_size_mean``: the mean anchor-group size (singletons included);
* ``gigpo/text_mixed_fraction``: of the groups text matching would form (size >= 2), the
  fraction that hold more than one exact state;
* ``gigpo/step_adv_abs_mean``: the step-level term's mean size over turns.

Nothing is learned besides the policy; the checkpoint holds the episode estimator's state.
Infrastructure failures are in no group; an env without an exact state key
(``TextEnv.exact_state`` false) is refused when the configuration is checked.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..batch import RolloutBatch, TokenBatch
from ..run.config import TrainConfig
from .base import ALGORITHMS, Advantages, options_problems
from .critic_free import CriticFree

__all__ = ["GiGPO", "GiGPOOptions", "anchor_statistics", "step_advantages"]


@dataclass(frozen=True)
class GiGPOOptions:
    omega: float = 1.0  # weight of the step-level term
    gamma: float = 1.0  # discount of the return that follows a turn
    step_std: bool = False  # divide the step level by its anchor group's std
    eps: float = 1e-6  # an anchor group whose std is <= eps gets 0 (step_std only)

    def problems(self, config: TrainConfig | None = None) -> list[str]:
        out = []
        if not math.isfinite(self.omega) or self.omega < 0:
            out.append(f"omega must be a finite number >= 0, got {self.omega!r}")
        if not 0.0 < self.gamma <= 1.0:
            out.append(f"gamma must be in (0, 1], got {self.gamma!r}")
        if self.eps < 0:
            out.append(f"eps must be >= 0, got {self.eps!r}")
        if config is not None and config.k < 2:
            out.append("gigpo compares the branches of a task and needs k >= 2")
        if config is not None:
            out += env_problems(config.env)
        return out


def env_problems(env_id: str) -> list[str]:
    """``[]`` when ``env_id`` gives an exact state key; else one line saying so. An id that is
    not registered is left to where the env is made."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import TextEnv

    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return []
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    if isinstance(creator, type) and issubclass(creator, TextEnv) and creator.exact_state:
        return []
    return [
        f"gigpo matches exact env states, and {env_id} has no state key (a forkgym TextEnv "
        "with exact_state=True); use algorithm critic_free"
    ]


def step_advantages(
    keys: Sequence[Sequence[str]],
    returns: Sequence[Sequence[float]],
    *,
    std: bool = False,
    eps: float = 1e-6,
) -> list[list[float]]:
    """The step-level advantage of every turn of one group: ``keys[b][t]`` the state at the
    start of turn ``t`` of branch ``b``, ``returns[b][t]`` the return that follows. Turns
    with equal keys form an anchor group; each gets its return minus the group's mean
    (divided by the population std with ``std``); a group of one, or one whose returns are all
    equal, gets exact zeros."""
    anchors: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for b, row in enumerate(keys):
        for t, key in enumerate(row):
            anchors[key].append((b, t))
    out = [[0.0] * len(row) for row in keys]
    for members in anchors.values():
        values = torch.tensor([returns[b][t] for b, t in members], dtype=torch.float64)
        if len(members) < 2 or bool(values.max() == values.min()):
            continue
        centered = values - values.mean()
        if std:
            scale = float(centered.square().mean().sqrt())
            if scale <= eps:
                continue
            centered = centered / scale
        for (b, t), value in zip(members, centered.tolist(), strict=True):
            out[b][t] = value
    return out


def anchor_statistics(
    state_keys: Sequence[Sequence[Sequence[str]]], text_keys: Sequence[Sequence[Sequence[str]]]
) -> dict[str, float]:
    """How much grouping happened over groups ``[P][K][turns]`` of state and text keys: the
    fraction of turns in an anchor group of size >= 2, the mean anchor-group size, and of the
    groups text matching would form (size >= 2), the fraction holding more than one state."""
    turns = grouped = anchors = text_groups = mixed = 0
    for states, texts in zip(state_keys, text_keys, strict=True):
        sizes: dict[str, int] = defaultdict(int)
        by_text: dict[str, set[str]] = defaultdict(set)
        count: dict[str, int] = defaultdict(int)
        for row_states, row_texts in zip(states, texts, strict=True):
            for state, text in zip(row_states, row_texts, strict=True):
                sizes[state] += 1
                by_text[text].add(state)
                count[text] += 1
        turns += sum(sizes.values())
        grouped += sum(n for n in sizes.values() if n >= 2)
        anchors += len(sizes)
        text_groups += sum(1 for t in count if count[t] >= 2)
        mixed += sum(1 for t in count if count[t] >= 2 and len(by_text[t]) > 1)
    return {
        "anchor_fraction": grouped / turns if turns else 0.0,
        "anchor_size_mean": turns / anchors if anchors else 0.0,
        "text_groups": float(text_groups),
        "text_mixed_fraction": mixed / text_groups if text_groups else 0.0,
    }


@ALGORITHMS.register("gigpo")
class GiGPO(CriticFree):
    """Episode-level estimator plus omega times the anchor-state step level (module docstring)."""

    token_advantages = True  # each turn's tokens get their own advantage
    needs_states = True  # the rollouts record each turn's state key

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None, **options: Any) -> None:  # fmt: skip
        super().__init__(config, model)
        self.options = GiGPOOptions(**options)
        problems = self.options.problems()
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def check_options(cls, config: TrainConfig, **options: Any) -> list[str]:
        """The episode estimator's rules, then GiGPO's own options and env."""
        return super().check_options(config) + options_problems(GiGPOOptions, options, config)

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        episode = super().advantages(batch, tokens)
        grid = torch.zeros(batch.rewards.shape, dtype=torch.float32)
        if not len(tokens):
            return Advantages(torch.zeros(0), grid, episode.metrics)
        o, k = self.options, batch.k
        step: dict[int, list[float]] = {}  # flat index -> per-turn step-level advantage
        states, texts = [], []
        for p in range(batch.prompts):
            branches = [b for b in range(k) if bool(batch.valid[p, b])]
            turns = [batch.turn_states[p][b] for b in branches] if batch.turn_states else []
            if len(turns) != len(branches) or any(not t[1] for t in turns):
                raise ValueError(
                    "gigpo needs the rollouts' state keys (Rollouts(record_states=True))"
                )
            keys = [t[1] for t in turns]
            returns = [
                [o.gamma ** (len(row) - 1 - t) * float(batch.rewards[p, b]) for t in range(len(row))]
                for b, row in zip(branches, keys, strict=True)
            ]  # fmt: skip
            for b, values in zip(branches, step_advantages(keys, returns, std=o.step_std, eps=o.eps), strict=True):  # fmt: skip
                step[p * k + b] = values
            states.append(keys)
            texts.append([t[2] for t in turns])
        mask = tokens.action_mask
        rows = episode.rows[:, None] * mask
        sizes = []
        for row, flat in enumerate(tokens.index.tolist()):
            starts = batch.turn_states[flat // k][flat % k][0]
            ends = [*starts[1:], mask.shape[1]]
            for start, end, value in zip(starts, ends, step[flat], strict=True):
                rows[row, start:end] += o.omega * value * mask[row, start:end]
            sizes += [abs(v) for v in step[flat]]
        grid.view(-1)[tokens.index] = rows.sum(1) / mask.sum(1).clamp(min=1)
        stats = anchor_statistics(states, texts)
        metrics = {
            **episode.metrics,
            **{f"gigpo/{key}": value for key, value in stats.items()},
            "gigpo/step_adv_abs_mean": sum(sizes) / len(sizes) if sizes else 0.0,
        }
        return Advantages(rows.to(torch.float32), grid, metrics)
