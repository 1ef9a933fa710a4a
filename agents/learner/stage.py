"""The policy update: token losses over micro-batches, the optimizer and its learning rate.

One call of :meth:`Learner.update` is one training step's update: ``ppo_epochs`` passes over
the step's rows, each split into ``minibatches`` optimizer steps, each of those into
micro-batches of at most ``micro_batch_size`` rows whose gradients accumulate. The loss's
denominator (:class:`~forkgym.agents.learner.reductions.Normaliser`) is built once per optimizer step
from all its micro-batches, so the gradient does not depend on how rows are split. The
shuffles are keyed by (seed, step, epoch), and the learning rate is a pure function of the
step, so a resumed run updates exactly as the uninterrupted one.

The learner scores its own model with :mod:`forkgym.agents.learner.logprobs`, whatever backend
generates: generation and learning meet only at ``policy.sync_weights``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from ..batch import MicroBatch, TokenBatch
from ..distributed import World
from ..generation.dapo import mask_truncated
from ..run.config import TrainConfig
from ..seeds import shuffle_key
from ..timing import Stages
from .diagnostics import sequence_losses
from .drift import correction_weights, drift_metrics
from .logprobs import token_logprobs, token_logprobs_and_entropy
from .losses import PolicyLoss, get_loss
from .passes import MetricMeans, clip_and_step, optimizer_steps
from .prefix_sharing import (
    PrefixLayout,
    plan_prefixes,
    shared_prefix_logprobs,
    supports_prefix_sharing,
)
from .reductions import Normaliser
from .schedules import lr_factor_at
from .sharding import (
    full_state_dict,
    idle_pass,
    is_sharded,
    load_full_state_dict,
    load_optimizer_state,
    optimizer_state,
)

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
    timing: dict[str, float] = field(default_factory=dict)  # time/forward_and_loss, ...
    lr: float = 0.0  # the step's learning rate
    # [N] each row's mean loss term in the first epoch (with config.diagnose_losses)
    sequence_losses: torch.Tensor | None = None


class Learner:
    """Owns the training model's optimizer, loss and (with a KL term) the reference model."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainConfig,
        *,
        max_episode_tokens: int,
        world: World | None = None,
    ) -> None:
        """``max_episode_tokens``: the episode's generation budget (all turns), Dr. GRPO's
        constant. ``world``: the data-parallel ranks (by default, this process's group)."""
        self.model = model
        self.config = config
        self.world = world if world is not None else World.current()
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
        # sharded (FSDP2, agents/learner/sharding.py): every rank must run as many passes as the
        # others, and whole weights are gathered for the engine and checkpoints. Detected here
        # once and passed down; the configuration refuses what a sharded run cannot do.
        self.sharded = is_sharded(model)
        # the weights training starts from, frozen: KL is measured against them
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
        # one forward per distinct prompt (agents/learner/prefix_sharing.py); a sharded model keeps the
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

    def correct_drift(self, tokens: TokenBatch) -> tuple[TokenBatch, dict[str, float]]:
        """When the run measures drift (``TrainConfig.measures_drift``): the engine's behaviour
        log-probs against the training model's (``drift/...``, raw statistics) and the rows
        with the configured corrections applied (agents/learner/drift.py); else the rows as they are."""
        config = self.config
        if not config.measures_drift:
            return tokens, {}
        current = self.current_logprobs(tokens)
        metrics = drift_metrics(current, tokens.old_logprobs, tokens.action_mask)
        corrections = config.drift_corrections
        if corrections:
            weights, stats = correction_weights(
                current,
                tokens.old_logprobs,
                tokens.action_mask,
                corrections,
                tis_clamp=config.tis_clamp,
                seq_band=config.seq_mask_band,
                geo_band=config.geo_mask_band,
            )
            metrics.update(stats)
            tokens = tokens.with_correction(current, weights)
        return tokens, metrics

    def _idle_passes(self, passes: int) -> int:
        """Sharded: how many passes fewer than the busiest rank this rank will run (agreed
        before any of them, since the agreement is a collective of its own)."""
        return self.world.most(passes) - passes if self.sharded else 0

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
        return token_logprobs_and_entropy(model, mb.input_ids, mb.attention_mask, temperature)

    def update(
        self, tokens: TokenBatch, advantages: torch.Tensor, step: int, *, train: bool = True
    ) -> Update:
        """This step's learning rate, then PPO epochs over mini-batches of ``tokens``; one
        optimizer step (and one normaliser) each. ``advantages``: ``[N]`` per row, or
        ``[N, T]`` per token (a critic's). ``train=False``: the learning rate only (a step
        that trains what the algorithm owns alone, a critic's warm-up)."""
        config = self.config
        result = Update(lr=self.set_lr(step))
        if not train:
            return result
        if not len(tokens):
            if self.world.size > 1:
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
        stages = Stages()
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
                with stages("forward_and_loss"):
                    loss, metrics = self._loss(mb, norm, result, first_epoch=epoch == 0)
                with stages("backward"):
                    loss.backward()
                means.add(metrics, float(mb.tokens))
            self._run_idle(idle, backward=True)
            with stages("optimizer"):
                norm_before = clip_and_step(
                    self.model.parameters(), self.optimizer, config.grad_clip, sharded=self.sharded
                )
            grad_norms.append(norm_before)
        result.timing = stages.metrics()
        result.optimizer_steps = len(grad_norms)
        result.metrics.update(means.result(max(result.optimizer_steps, 1), config.ppo_epochs))
        result.grad_norm = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
        return result

    def _loss(
        self, mb: MicroBatch, norm: Normaliser, result: Update, *, first_epoch: bool
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's loss under the step's normaliser, and its metrics."""
        layout = self._layout(mb)  # the policy and the reference read the same rows
        logprobs, entropy = self._score(self.model, mb, layout, entropy=True)
        ref = None
        if self.reference is not None and not self.config.kl_in_reward:
            with torch.no_grad():  # the reference's entropy is never used
                ref = self._reference(mb, layout)
        terms, bmask, extra = self.loss_fn.terms(
            logprobs, mb.old_logprobs, mb.advantages, mb.action_mask,
            ref_logprobs=ref, is_weights=mb.is_weights,
        )  # fmt: skip
        if result.sequence_losses is not None and first_epoch:
            result.sequence_losses[mb.rows] = sequence_losses(terms, bmask).cpu()
        return self.loss_fn.reduce(terms, bmask, extra, normaliser=norm, entropy=entropy)

    def _shuffle_key(self, step: int, epoch: int) -> tuple[int | str, ...] | None:
        """The first pass keeps the rows' order unless it is split; later passes shuffle."""
        if epoch == 0 and self.config.minibatches == 1:
            return None
        return shuffle_key(self.config.seed, "shuffle", step, epoch)

    # -- the weights, for the engine and for checkpoints ----------------------------------------

    def engine_weights(self) -> torch.nn.Module | dict[str, Any]:
        """What a generation engine loads: the model, or (sharded) the whole weights every
        rank gathers from the shards for its own engine (a collective)."""
        return full_state_dict(self.model) if self.sharded else self.model

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint takes from every rank (a collective when sharded): the optimizer's
        state and, sharded, the whole weights (on rank 0; None: the module's own)."""
        whole = full_state_dict(self.model, rank0_only=True) if self.sharded else None
        return {"optimizer": self.state_dict(), "model_state": whole}

    def load_weights(self, weights: dict[str, Any]) -> Any:
        """Whole weights into the model, sharded or not; the missing and unexpected keys."""
        if self.sharded:
            return load_full_state_dict(self.model, weights)
        return self.model.load_state_dict(weights, strict=False)

    def check_replicas(self, world: World, step: int) -> None:
        """Replicated data parallelism: every rank's weights must be rank 0's (they take the
        same steps from the same start), checked before a checkpoint holds rank 0's only. A
        sharded model has one copy of each shard: nothing to compare."""
        if world.size == 1 or self.sharded:
            return
        with torch.no_grad():
            checksum = sum(float(p.double().sum()) for p in self.model.parameters())
        if not world.agree(checksum):
            raise RuntimeError(
                f"step {step}: the data-parallel ranks' weights differ; a rank trained on "
                "something the others did not (see agents/distributed.py)"
            )

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
