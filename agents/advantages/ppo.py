"""PPO with a learned critic, the baseline the critic-free estimators are compared against.

``algorithm: ppo`` in a training config. The critic is, by default, a separate value model: a
copy of the policy's transformer trunk (initialised from the policy's weights) with a scalar
head that starts at zero, so the first advantages are the plain returns. With
``value_model: shared`` it is a scalar head on the policy's own trunk instead: one model in
memory, and the value loss trains the head only (a value loss flowing into the shared trunk
would move the policy outside its own clipped loss and reduction, which is what the
comparison with the critic-free estimators must hold fixed). Per step:

1. the value model scores every row: ``V[t]`` is the value of the state before action token
   ``t`` (read from the trunk's hidden state at ``t - 1``, the alignment of the log-probs);
2. each response's (shaped) reward sits on its last action token, and GAE runs over action
   tokens only (:func:`~forkgym.agents.advantages.critic.gae`: tool output between turns is not a step),
   with ``gamma`` and ``lam`` for the policy's advantages and ``value_lam`` (default: ``lam``)
   for the critic's targets (long chain-of-thought PPO wants ``value_lam = 1``: an unbiased
   target, while the policy keeps a lower-variance ``lam``); optionally the per-response advantages are centred within
   their group (``group_centering``: ``loo`` or ``mean``, see
   :func:`~forkgym.agents.advantages.critic.critic_group_centered` for the bias each adds), and
   optionally whitened over the step's action tokens (``normalize_advantages``: zero mean, unit
   standard deviation, as most PPO implementations do for RLHF);
3. the policy trains on the token-level advantages with the configured loss (not ``gspo``,
   whose ratio is per response);
4. the value model trains on the returns with PPO's clipped value loss, ``value_epochs``
   passes over the step's ``value_minibatches`` mini-batches (default: the run's), with its own AdamW at ``value_lr`` (default: ``lr``)
   under the run's learning-rate schedule.

``value_warmup_steps``: for the first steps only the critic trains (the policy does not move);
those steps generate rollouts like any other, so their tokens and time count in every budget.

Logged under ``critic/``: value and return means, explained variance before the update (of
the critic's targets, and ``explained_variance_return`` of the Monte Carlo returns: the same
where ``value_lam`` is 1, while bootstrapped targets contain the critic's own values and
flatter it),
value loss, value-clip fraction, the value model's gradient norm and learning rate.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any

import torch

from ..batch import MicroBatch, RolloutBatch, TokenBatch
from ..learner.logprobs import position_ids_from_mask
from ..learner.passes import MetricMeans, clip_and_step, optimizer_steps
from ..learner.prefix_sharing import cache_argument, plan_prefixes, scatter_to_rows, suffix_outputs
from ..learner.schedules import lr_factor_at
from ..run.config import TrainConfig
from ..seeds import shuffle_key
from .base import ALGORITHMS, Advantages, Algorithm, options_problems
from .critic import (
    clipped_value_loss,
    explained_variance,
    gae,
    group_centered_rows,
    terminal_rewards,
    whitened,
)

__all__ = ["PPO", "PPOOptions", "SharedValueHead", "ValueModel"]


def _trunk_values(
    trunk: torch.nn.Module,
    head: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    action_mask: torch.Tensor | None,
    *,
    frozen: bool = False,
) -> torch.Tensor:
    """``[B, T]``: ``head`` on the trunk's state before each token (0 for token 0); with
    ``frozen`` the trunk runs without gradient. Given the action mask (and a trunk that takes
    a KV cache), each distinct prompt runs once (:mod:`forkgym.agents.learner.prefix_sharing`) and
    prompt positions hold 0."""
    grad = torch.no_grad() if frozen else contextlib.nullcontext()
    layout = None
    if action_mask is not None and cache_argument(trunk) is not None:
        layout = plan_prefixes(input_ids, attention_mask, action_mask)
    if layout is not None:
        with grad:
            states = suffix_outputs(trunk, layout, "last_hidden_state")
        return scatter_to_rows(head(states.float()).squeeze(-1), layout)
    with grad:
        hidden = trunk(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state
    values = head(hidden[:, :-1].float()).squeeze(-1)  # state before token t
    return torch.nn.functional.pad(values, (1, 0))


class _ValueHead(torch.nn.Module):
    """A scalar head (zero at the start) on a trunk: ``[B, T]`` values aligned with the
    tokens. With ``action_mask``, prompts are shared and only their positions read 0."""

    frozen = False  # True: the trunk runs without gradient

    def __init__(self, policy: torch.nn.Module, trunk: torch.nn.Module | None = None) -> None:
        super().__init__()
        # the trunk is registered before the head: the parameter order (and so the optimizer
        # state's) that earlier checkpoints were written in
        if trunk is not None:
            self.trunk = trunk
        self.head = torch.nn.Linear(policy.config.hidden_size, 1, bias=True)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def _trunk(self) -> torch.nn.Module:
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        action_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return _trunk_values(
            self._trunk(), self.head, input_ids, attention_mask, action_mask, frozen=self.frozen
        )


class ValueModel(_ValueHead):
    """A copy of a causal LM's trunk with a scalar head."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__(policy, copy.deepcopy(policy.base_model))
        self.to(next(policy.parameters()).device)

    def _trunk(self) -> torch.nn.Module:
        return self.trunk


class SharedValueHead(_ValueHead):
    """A scalar head on the POLICY's trunk: its only parameters are the head's.

    The trunk is read without gradient, so the value loss never moves the policy; the trunk is
    held outside the module's parameters (and state dict), which hold the head alone.
    """

    frozen = True

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__(policy)
        self._policy = [policy]  # a list: not registered as a sub-module
        self.to(next(policy.parameters()).device)

    def _trunk(self) -> torch.nn.Module:
        return self._policy[0].base_model


VALUE_MODELS = {"separate": ValueModel, "shared": SharedValueHead}


@dataclass(frozen=True)
class PPOOptions:
    """PPO's own options (``algorithm_kwargs``); see the module docstring."""

    gamma: float = 1.0
    lam: float = 1.0  # the policy's advantages
    value_lam: float | None = None  # the critic's targets (None: lam)
    value_model: str = "separate"  # "separate" (a copy of the trunk) or "shared" (a head on it)
    value_warmup_steps: int = 0  # the first steps train the critic only
    value_lr: float | None = None  # None: the run's lr
    value_clip: float | None = 0.2  # None: the plain squared error
    value_epochs: int | None = None  # None: the run's ppo_epochs
    value_minibatches: int | None = None  # None: the run's minibatches
    group_centering: str | None = None  # None, "loo" or "mean"
    normalize_advantages: bool = False  # whiten over the step's action tokens (after centring)

    def problems(self, config: TrainConfig) -> list[str]:
        """What is wrong with these options for this config (nothing: ``[]``)."""
        out = []
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            out.append(f"gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")
        if self.value_lam is not None and not 0 <= self.value_lam <= 1:
            out.append(f"value_lam must be in [0, 1] (or null: lam), got {self.value_lam}")
        if self.value_model not in VALUE_MODELS:
            out.append(f"value_model must be one of {sorted(VALUE_MODELS)}, got {self.value_model!r}")  # fmt: skip
        if self.value_warmup_steps < 0:
            out.append(f"value_warmup_steps must be >= 0, got {self.value_warmup_steps}")
        elif self.value_warmup_steps >= config.steps:
            out.append(
                f"value_warmup_steps={self.value_warmup_steps} leaves no step for the policy "
                f"(steps={config.steps})"
            )
        if self.value_lr is not None and not self.value_lr > 0:
            out.append(f"value_lr must be > 0, got {self.value_lr}")
        if self.value_clip is not None and not self.value_clip > 0:
            out.append(f"value_clip must be > 0 (or null: no clipping), got {self.value_clip}")
        if self.value_epochs is not None and self.value_epochs < 1:
            out.append(f"value_epochs must be >= 1, got {self.value_epochs}")
        if self.value_minibatches is not None and self.value_minibatches < 1:
            out.append(f"value_minibatches must be >= 1, got {self.value_minibatches}")
        if self.group_centering not in (None, "loo", "mean"):
            out.append(f"group_centering must be null, 'loo' or 'mean', got {self.group_centering!r}")  # fmt: skip
        elif self.group_centering is not None and config.k < 2:
            out.append(f"group_centering={self.group_centering!r} needs k >= 2")
        return out


@ALGORITHMS.register("ppo")
class PPO(Algorithm):
    """A learned critic: GAE advantages per action token, a clipped value loss."""

    token_advantages = True  # the loss must take [N, T] advantages
    owns_model = True  # the value model (a copy of the trunk, or a head on it)

    def __init__(self, config: TrainConfig, model: torch.nn.Module, **options: Any) -> None:
        self.options = PPOOptions(**options)
        problems = self.options.problems(config)
        if problems:
            raise ValueError("; ".join(problems))
        self.config = config
        self.value_epochs = self.options.value_epochs or config.ppo_epochs
        self.value = VALUE_MODELS[self.options.value_model](model)
        self.value.train()
        self.optimizer = torch.optim.AdamW(
            self.value.parameters(),
            lr=self.options.value_lr or config.lr,
            betas=config.betas,
            weight_decay=config.weight_decay,
        )
        self._old_values: torch.Tensor | None = None
        self._returns: torch.Tensor | None = None

    def trains_policy(self, step: int) -> bool:
        """False during the critic's warm-up: the step trains the value model only."""
        return step >= self.options.value_warmup_steps

    @classmethod
    def check_options(cls, config: TrainConfig, **options: Any) -> list[str]:
        """What is wrong with these options for this config (nothing: ``[]``)."""
        return options_problems(PPOOptions, options, config)

    def _prompts(self, mb: MicroBatch) -> torch.Tensor | None:
        """The action mask that lets the value model share prompts (None: the full forward)."""
        return mb.action_mask if self.config.prefix_sharing else None

    # -- advantages -----------------------------------------------------------------------------

    @torch.no_grad()
    def _values(self, tokens: TokenBatch) -> torch.Tensor:
        return tokens.score(
            lambda mb: self.value(mb.input_ids, mb.attention_mask, self._prompts(mb)),
            size=self.config.micro_batch_size,
            device=self.config.device,
        )

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        grid = torch.zeros(batch.rewards.shape, dtype=torch.float32)
        if not len(tokens):
            return Advantages(torch.zeros(0), grid)
        mask = tokens.action_mask
        values = self._values(tokens)
        scores = batch.rewards.reshape(-1)[tokens.index].to(torch.float32)
        rewards = terminal_rewards(scores, mask)
        adv, returns = gae(rewards, values, mask, gamma=self.options.gamma, lam=self.options.lam)
        value_lam = self.options.value_lam
        if value_lam is not None and value_lam != self.options.lam:
            _, returns = gae(rewards, values, mask, gamma=self.options.gamma, lam=value_lam)
        metrics: dict[str, float] = {}
        if self.options.group_centering is not None:
            adv, stats = self._centred(adv, batch, tokens)
            metrics.update({f"critic/centering_{k}": v for k, v in stats.items()})
        if self.options.normalize_advantages:
            adv = whitened(adv, mask)
        self._old_values, self._returns = values, returns
        per_response = (adv * mask).sum(1) / mask.sum(1).clamp(min=1)
        grid.view(-1)[tokens.index] = per_response
        ret, val = returns[mask].double(), values[mask].double()
        if (self.options.lam if value_lam is None else value_lam) == 1:
            full = ret  # the targets are the Monte Carlo returns already
        else:  # bootstrapped targets hold the critic's own values: read it on the returns too
            full = gae(rewards, values, mask, gamma=self.options.gamma, lam=1.0)[1][mask].double()
        metrics.update(
            {
                "critic/value_mean": float(val.mean()) if val.numel() else 0.0,
                "critic/return_mean": float(ret.mean()) if ret.numel() else 0.0,
                "critic/explained_variance": explained_variance(ret, val),
                "critic/explained_variance_return": explained_variance(full, val),
                "critic/adv_mean": float(adv[mask].mean()) if mask.any() else 0.0,
                "critic/adv_abs_max": float(adv[mask].abs().max()) if mask.any() else 0.0,
            }
        )
        return Advantages(adv, grid, metrics)

    def _centred(
        self, adv: torch.Tensor, batch: RolloutBatch, tokens: TokenBatch
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mode = self.options.group_centering or "loo"
        return group_centered_rows(adv, tokens.action_mask, tokens.index, batch.valid, mode=mode)

    # -- the critic's own update ----------------------------------------------------------------

    def update(self, tokens: TokenBatch, step: int) -> dict[str, float]:
        if not len(tokens) or self._returns is None or self._old_values is None:
            return {}
        config = self.config
        lr = (self.options.value_lr or config.lr) * lr_factor_at(config, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        means = MetricMeans(per_step=frozenset({"value_loss"}))
        grad_norms = []
        steps = optimizer_steps(
            tokens,
            None,
            epochs=self.value_epochs,
            minibatches=self.options.value_minibatches or config.minibatches,
            shuffle_key=lambda epoch: shuffle_key(config.seed, "critic-shuffle", step, epoch),
            micro_batch_size=config.micro_batch_size,
            device=config.device,
            reduction="token_mean",
        )
        for _, micros, norm in steps:
            for mb in micros:
                width = mb.input_ids.size(1)
                values = self.value(mb.input_ids, mb.attention_mask, self._prompts(mb))
                loss, metrics = clipped_value_loss(
                    values,
                    self._old_values[mb.rows, :width].to(values.device),
                    self._returns[mb.rows, :width].to(values.device),
                    mb.action_mask,
                    clip_eps=self.options.value_clip,
                    normaliser=norm,
                )
                loss.backward()
                kept = {k: metrics[k] for k in ("value_loss", "value_clip_frac")}
                means.add(kept, float(mb.tokens))
            grad_norms.append(clip_and_step(self.value.parameters(), self.optimizer, config.grad_clip))  # fmt: skip
        out = {f"critic/{k}": v for k, v in means.result(max(len(grad_norms), 1), 1).items()}
        out["critic/grad_norm"] = sum(grad_norms) / max(len(grad_norms), 1)
        out["critic/lr"] = lr
        self._old_values = self._returns = None
        return out

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value.load_state_dict(state["value"])
        self.optimizer.load_state_dict(state["optimizer"])
