"""The policy update: token losses over micro-batches, the optimizer and its learning rate.

One call of :meth:`Learner.update` is one training step's update: ``ppo_epochs`` passes over
the step's rows, each split into ``minibatches`` optimizer steps, each of those into
micro-batches of at most ``micro_batch_size`` rows whose gradients accumulate. The loss's
denominator (:class:`~forkgym.agents.reductions.Normaliser`) is built once per optimizer step
from all its micro-batches, so the gradient does not depend on how rows are split. The
shuffles are keyed by (seed, step, epoch), and the learning rate is a pure function of the
step, so a resumed run updates exactly as the uninterrupted one.

The learner scores its own model with :mod:`forkgym.agents.logprobs`, whatever backend
generates: generation and learning meet only at ``policy.sync_weights``.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from .batch import MicroBatch, TokenBatch
from .config import TrainConfig
from .dapo import mask_truncated
from .diagnostics import sequence_losses
from .distributed import ranks
from .logprobs import token_logprobs, token_logprobs_and_entropy
from .losses import PolicyLoss, get_loss
from .passes import MetricMeans, clip_and_step, optimizer_steps
from .prefix_sharing import (
    PrefixLayout,
    plan_prefixes,
    shared_prefix_logprobs,
    supports_prefix_sharing,
)
from .schedules import lr_factor_at
from .seeds import shuffle_key
from .sharding import idle_pass, is_sharded, load_optimizer_state, most_passes, optimizer_state

__all__ = ["Learner", "Update"]

# loss metrics that add up over an optimizer step's micro-batches, and counts every pass repeats
_PER_STEP = frozenset({"loss", "policy_loss"})
_PER_EPOCH = frozenset({"tokens", "sequences"})


@dataclass
class Update:
    """What one step's update did."""

    metrics: dict[str, float] = field(default_factory=dict)  # the loss's, averaged
    grad_norm: float = 0.0  # mean over optimizer steps, before clipping
    tokens_trained: int = 0
    optimizer_steps: int = 0
    timing: Counter[str] = field(default_factory=Counter)
    # [N] each row's mean loss term in the first epoch (with config.diagnose_losses)
    sequence_losses: torch.Tensor | None = None


class Learner:
    """Owns the training model's optimizer, loss and (with a KL term) the reference model."""

    def __init__(
        self, model: torch.nn.Module, config: TrainConfig, *, max_episode_tokens: int
    ) -> None:
        """``max_episode_tokens``: the episode's generation budget (all turns), Dr. GRPO's constant."""
        self.model = model
        self.config = config
        self.loss_fn: PolicyLoss = get_loss(
            config.loss,
            reduction=config.reduction,
            max_episode_tokens=max_episode_tokens,
            kl_coef=0.0 if config.kl_in_reward else config.kl_coef,
            kl_estimator=config.kl_estimator,
            **config.loss_kwargs,
        )
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
        )
        # sharded (FSDP2, agents/sharding.py): every rank must run as many passes as the others
        self.sharded = is_sharded(model)
        if self.sharded and config.kl_coef > 0:
            raise ValueError("a KL reference model is not sharded yet: kl_coef must be 0")
        # the weights training starts from, frozen: KL is measured against them
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
        # one forward per distinct prompt (agents/prefix_sharing.py); a sharded model keeps the
        # full forward, whose one call per pass the idle passes of other ranks match
        self.share_prefixes = (
            config.prefix_sharing and not self.sharded and supports_prefix_sharing(model)
        )

    @property
    def reduction(self) -> str:
        return self.loss_fn.reduction

    def set_lr(self, step: int) -> float:
        """This step's learning rate, a function of the step alone (resumes exactly)."""
        lr = self.config.lr * lr_factor_at(self.config, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    @torch.no_grad()
    def reference_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        """``[N, T]`` log-probs of every row under the reference model (for KL in the reward)."""
        if self.reference is None:
            raise RuntimeError("no reference model: kl_coef is 0")
        return tokens.score(
            lambda mb: self._reference(mb, self._layout(mb)),
            size=self.config.micro_batch_size,
            device=self.config.device,
        )

    @torch.no_grad()
    def current_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        """``[N, T]`` log-probs of every row under the training model as it is now (before the
        update): what a separate engine's behaviour log-probs are compared with."""
        size = self.config.micro_batch_size
        idle = self._idle_passes(-(-len(tokens) // size))  # before any pass: a collective
        out = tokens.score(
            lambda mb: self._logprobs(self.model, mb), size=size, device=self.config.device
        )
        self._run_idle(idle, backward=False)
        return out

    def _idle_passes(self, passes: int) -> int:
        """Sharded: how many passes fewer than the busiest rank this rank will run (agreed
        before any of them, since the agreement is a collective of its own)."""
        return most_passes(passes) - passes if self.sharded else 0

    def _run_idle(self, count: int, *, backward: bool) -> None:
        for _ in range(count):
            idle_pass(self.model, backward=backward, device=self.config.device)

    def _reference(self, mb: MicroBatch, layout: PrefixLayout | None) -> torch.Tensor:
        assert self.reference is not None
        return self._score(self.reference, mb, layout)[0]

    def _logprobs(self, model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
        """``model``'s log-probs of a micro-batch at the run's temperature."""
        return self._score(model, mb, self._layout(mb))[0]

    def _layout(self, mb: MicroBatch) -> PrefixLayout | None:
        """Where the micro-batch's distinct prompts sit (None: the full forward)."""
        if not self.share_prefixes:
            return None
        return plan_prefixes(mb.input_ids, mb.attention_mask, mb.action_mask)

    def _score(
        self,
        model: torch.nn.Module,
        mb: MicroBatch,
        layout: PrefixLayout | None,
        *,
        entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[B, T]`` log-probs (with gradients when enabled) and, with ``entropy``, the
        detached entropies; each distinct prompt's forward shared when a layout is given."""
        temperature = self.config.temperature
        if layout is not None:
            return shared_prefix_logprobs(model, layout, temperature, entropy=entropy)
        if not entropy:
            return token_logprobs(model, mb.input_ids, mb.attention_mask, temperature), None
        logprobs, ent = token_logprobs_and_entropy(
            model, mb.input_ids, mb.attention_mask, temperature
        )
        return logprobs, ent.detach()

    def update(self, tokens: TokenBatch, advantages: torch.Tensor, step: int) -> Update:
        """PPO epochs over mini-batches of ``tokens``; one optimizer step (and one normaliser)
        each. ``advantages``: ``[N]`` per row, or ``[N, T]`` per token (a critic's)."""
        config = self.config
        result = Update()
        if not len(tokens):
            if ranks() > 1:
                # the other ranks would wait for this one's counts and gradients forever
                raise RuntimeError(
                    "a data-parallel rank got no rows this step: give every rank a share"
                )
            return result
        if config.mask_truncated:  # DAPO's overlong filtering: out of the loss, still counted
            mask, stats = mask_truncated(tokens.action_mask, tokens.truncated)
            tokens = tokens.with_action_mask(mask)
            result.metrics.update(stats)  # truncated_responses, truncated_tokens_masked, ...
        result.tokens_trained = int(tokens.generated.sum())  # the action tokens in the loss
        if config.diagnose_losses:
            result.sequence_losses = torch.zeros(len(tokens), dtype=torch.float32)
        means = MetricMeans(per_step=_PER_STEP, per_epoch=_PER_EPOCH)
        grad_norms = []
        steps = optimizer_steps(
            tokens,
            advantages,
            epochs=config.ppo_epochs,
            minibatches=config.minibatches,
            shuffle_key=lambda epoch: self._shuffle_key(step, epoch),
            micro_batch_size=config.micro_batch_size,
            device=config.device,
            reduction=self.reduction,
            max_episode_tokens=self.loss_fn.max_episode_tokens,
        )
        for epoch, micros, norm in steps:
            idle = self._idle_passes(len(micros))
            for mb in micros:
                t0 = time.perf_counter()
                layout = self._layout(mb)  # the policy and the reference read the same rows
                logprobs, entropy = self._score(self.model, mb, layout, entropy=True)
                ref = None
                if self.reference is not None and not config.kl_in_reward:
                    with torch.no_grad():  # the reference's entropy is never used
                        ref = self._reference(mb, layout)
                terms, bmask, extra = self.loss_fn.terms(
                    logprobs, mb.old_logprobs, mb.advantages, mb.action_mask,
                    ref_logprobs=ref, is_weights=mb.is_weights,
                )  # fmt: skip
                if result.sequence_losses is not None and epoch == 0:
                    result.sequence_losses[mb.rows] = sequence_losses(terms, bmask).cpu()
                loss, metrics = self.loss_fn.reduce(
                    terms, bmask, extra, normaliser=norm, entropy=entropy
                )
                t1 = time.perf_counter()
                loss.backward()
                result.timing["time/forward_and_loss"] += t1 - t0
                result.timing["time/backward"] += time.perf_counter() - t1
                means.add(metrics, float(mb.tokens))
            self._run_idle(idle, backward=True)
            t0 = time.perf_counter()
            grad_norms.append(clip_and_step(self.model.parameters(), self.optimizer, config.grad_clip))  # fmt: skip
            result.timing["time/optimizer"] += time.perf_counter() - t0
        result.optimizer_steps = len(grad_norms)
        result.metrics.update(means.result(max(result.optimizer_steps, 1), config.ppo_epochs))
        result.grad_norm = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
        return result

    def _shuffle_key(self, step: int, epoch: int) -> tuple[int | str, ...] | None:
        """The first pass keeps the rows' order unless it is split; later passes shuffle."""
        if epoch == 0 and self.config.minibatches == 1:
            return None
        return shuffle_key(self.config.seed, "shuffle", step, epoch)

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state; sharded, keyed by parameter name and whole on rank 0 only
        (every rank must call this)."""
        if self.sharded:
            return optimizer_state(self.model, self.optimizer)
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Either form, whatever wrote it (a sharded run, a replicated one, one process)."""
        params = state["param_groups"][0]["params"] if state.get("param_groups") else []
        if self.sharded or (params and isinstance(params[0], str)):
            load_optimizer_state(self.model, self.optimizer, state)
        else:
            self.optimizer.load_state_dict(state)
