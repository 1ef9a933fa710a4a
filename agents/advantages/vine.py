"""VinePPO: advantages from Monte Carlo values of forked states, no critic.

``algorithm: vine``. The third way of getting an advantage, beside a group baseline
(``critic_free``) and a learned critic (``ppo``): each sampled episode is cut into segments at
chosen states (the start of every turn; inside a turn every ``chunk`` tokens or after each
newline), the value of each state is estimated by ``rollouts`` continuations of the policy from
an exact fork of it (:mod:`forkgym.agents.generation.fork_values`), and every action token of segment
``j`` gets the segment's advantage (Kazemnejad et al., arXiv 2410.01679, eq. for
``A(s_t, a_t) = r + gamma V(s_{t+1}) - V(s_t)`` with ``gamma = 1`` and the reward at the end):

    A_j = V(s_{j+1}) - V(s_j)        for every segment but the last,
    A_J = R - V(s_J)                  for the last (R: the episode's reward),

so an episode's segment advantages sum to ``R - V(s_0)``, the start state's value being a
baseline estimated from continuations independent of the episode itself. Options
(``algorithm_kwargs``):

* ``rollouts`` (4): continuations per state; ``chunk`` (null) and ``lines`` (false): states
  inside a turn;
* ``group_centering`` (null, ``loo`` or ``mean``): subtract the group's mean per-response
  advantage, as PPO's option does (:func:`~forkgym.agents.advantages.critic.critic_group_centered`);
* ``normalize_advantages`` (false): whiten over the step's action tokens.

Every continuation's tokens are generated, so they count in the step's ``tokens_generated``
and in every budget (``tokens_generated_values``, ``gen/value_tokens``). Nothing is learned
besides the policy: the checkpoint holds no state of its own, and a resumed run draws the same
continuations (their seeds are keyed by the step and the state). The values are the env's
reward: reward shaping terms, which the continuations' values would not include, are
refused. Logged under ``vine/``: states per episode, the values' mean, the explained variance
of the episodes' rewards by their states' values (comparable to ``critic/explained_variance``)
and the advantages' size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..batch import RolloutBatch, TokenBatch
from ..generation.fork_values import ForkValues
from ..run.config import TrainConfig
from .base import ALGORITHMS, Advantages, Algorithm, options_problems
from .critic import explained_variance, group_centered_rows, whitened

__all__ = ["Vine", "VineOptions", "segment_advantages"]


@dataclass(frozen=True)
class VineOptions:
    rollouts: int = 4
    chunk: int | None = None
    lines: bool = False
    group_centering: str | None = None
    normalize_advantages: bool = False

    def problems(self, config: TrainConfig | None = None) -> list[str]:
        out = ForkValues(self.rollouts, self.chunk, self.lines).problems()
        if self.group_centering not in (None, "loo", "mean"):
            out.append(f"group_centering must be null, 'loo' or 'mean', got {self.group_centering!r}")  # fmt: skip
        elif self.group_centering is not None and config is not None and config.k < 2:
            out.append(f"group_centering={self.group_centering!r} needs k >= 2")
        if config is not None and config.overlong_buffer:
            out.append(
                "vine's Monte Carlo values are the env's reward, without the overlong penalty: "
                "set overlong_buffer=0"
            )
        if config is not None and config.kl_in_reward:
            out.append(
                "vine's Monte Carlo values are the env's reward, without a KL term: set "
                "kl_in_reward=false (a KL penalty in the loss, kl_coef, is fine)"
            )
        return out


def segment_advantages(
    action_mask: torch.Tensor, positions: list[int], values: list[float], reward: float
) -> torch.Tensor:
    """``[T]`` float32: each action token of one episode row gets its segment's advantage,
    ``V(next state) - V(its state)``, the last segment ``reward - V(its state)``. A segment
    starts at each of ``positions`` (token indices, ascending) with value ``values``; action
    tokens before the first position get 0 (no state valued before them)."""
    out = torch.zeros(action_mask.shape, dtype=torch.float32)
    ends = [*positions[1:], action_mask.numel()]
    after = [*values[1:], reward]
    for start, end, here, there in zip(positions, ends, values, after, strict=True):
        out[start:end] = there - here
    return torch.where(action_mask.to(torch.bool), out, 0.0)


@ALGORITHMS.register("vine")
class Vine(Algorithm):
    """Segment advantages from Monte Carlo values of exact forks (see the module docstring)."""

    token_advantages = True  # the loss must take [N, T] advantages

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None, **options: Any) -> None:  # fmt: skip
        self.options = VineOptions(**options)
        problems = self.options.problems(config)
        if problems:
            raise ValueError("; ".join(problems))
        o = self.options
        self.fork_values = ForkValues(o.rollouts, o.chunk, o.lines)  # generation runs it

    @classmethod
    def check_options(cls, config: TrainConfig, **options: Any) -> list[str]:
        """What is wrong with these options for this config (nothing: ``[]``)."""
        return options_problems(VineOptions, options, config)

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        grid = torch.zeros(batch.rewards.shape, dtype=torch.float32)
        if not len(tokens):
            return Advantages(torch.zeros(0), grid)
        mask = tokens.action_mask
        rewards = batch.rewards.reshape(-1)
        adv = torch.zeros(mask.shape, dtype=torch.float32)
        returns, estimates, states = [], [], []
        for row, flat in enumerate(tokens.index.tolist()):
            positions, values = batch.state_values[flat // batch.k][flat % batch.k]
            reward = float(rewards[flat])
            adv[row] = segment_advantages(mask[row], positions, values, reward)
            returns += [reward] * len(values)
            estimates += values
            states.append(len(values))
        metrics: dict[str, Any] = {}
        if self.options.group_centering is not None:
            adv, stats = group_centered_rows(adv, mask, tokens.index, batch.valid, mode=self.options.group_centering)  # fmt: skip
            metrics.update({f"vine/centering_{k}": v for k, v in stats.items()})
        if self.options.normalize_advantages:
            adv = whitened(adv, mask)
        grid.view(-1)[tokens.index] = (adv * mask).sum(1) / mask.sum(1).clamp(min=1)
        ret = torch.tensor(returns, dtype=torch.float64)
        val = torch.tensor(estimates, dtype=torch.float64)
        metrics.update(
            {
                "vine/states_per_episode": sum(states) / len(states),
                "vine/value_mean": float(val.mean()) if val.numel() else 0.0,
                "vine/explained_variance": explained_variance(ret, val),
                "vine/adv_abs_mean": float(adv[mask].abs().mean()) if mask.any() else 0.0,
            }
        )
        return Advantages(adv, grid, metrics)
