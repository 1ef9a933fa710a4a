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
from .diagnostics import sequence_losses
from .logprobs import token_logprobs, token_logprobs_and_entropy
from .losses import PolicyLoss, get_loss
from .reductions import build_normaliser
from .sampling import mask_truncated
from .schedules import lr_factor

__all__ = ["Learner", "Update"]

# loss metrics that add up over the micro-batches of an optimizer step; the others are
# token-weighted means
_SUMMED = frozenset({"loss", "tokens", "sequences", "policy_loss"})


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

    def __init__(self, model: torch.nn.Module, config: TrainConfig, *, max_new_tokens: int) -> None:
        """``max_new_tokens``: the episode's generation budget (all turns), Dr. GRPO's constant."""
        self.model = model
        self.config = config
        self.loss_fn: PolicyLoss = get_loss(
            config.loss,
            reduction=config.reduction,
            max_new_tokens=max_new_tokens,
            kl_coef=0.0 if config.kl_in_reward else config.kl_coef,
            kl_estimator=config.kl_estimator,
            **config.loss_kwargs,
        )
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
        )
        # the weights training starts from, frozen: KL is measured against them
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None

    @property
    def reduction(self) -> str:
        return self.loss_fn.reduction

    def set_lr(self, step: int) -> float:
        """This step's learning rate, a function of the step alone (resumes exactly)."""
        config = self.config
        lr = config.lr * lr_factor(
            config.lr_schedule,
            step,
            config.lr_decay_steps or config.steps,
            config.warmup_steps,
            config.lr_final_ratio,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    @torch.no_grad()
    def reference_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        """``[N, T]`` log-probs of every row under the reference model (for KL in the reward)."""
        if self.reference is None:
            raise RuntimeError("no reference model: kl_coef is 0")
        out = torch.zeros(tokens.old_logprobs.shape, dtype=torch.float32)
        rows = list(range(len(tokens)))
        for mb in tokens.micro_batches(rows, None, size=self.config.micro_batch_size, device=self.config.device):  # fmt: skip
            out[mb.rows, : mb.input_ids.size(1)] = self._reference(mb).float().cpu()
        return out

    def _reference(self, mb: MicroBatch) -> torch.Tensor:
        assert self.reference is not None
        return token_logprobs(
            self.reference, mb.input_ids, mb.attention_mask, temperature=self.config.temperature
        )

    def update(self, tokens: TokenBatch, advantages: torch.Tensor, step: int) -> Update:
        """PPO epochs over mini-batches of ``tokens``; one optimizer step (and one normaliser)
        each. ``advantages``: ``[N]`` per row, or ``[N, T]`` per token (a critic's)."""
        config = self.config
        result = Update()
        if not len(tokens):
            return result
        if config.mask_truncated:  # DAPO's overlong filtering: out of the loss, still counted
            mask, stats = mask_truncated(tokens.action_mask, tokens.truncated)
            tokens = tokens.with_action_mask(mask)
            result.metrics.update(stats)  # truncated_responses, truncated_tokens_masked, ...
        result.tokens_trained = int(tokens.generated.sum())  # the action tokens in the loss
        if config.diagnose_losses:
            result.sequence_losses = torch.zeros(len(tokens), dtype=torch.float32)
        summed: Counter[str] = Counter()
        weights = 0.0
        grad_norms = []
        for epoch in range(config.ppo_epochs):
            shuffled = epoch > 0 or config.minibatches > 1
            order_key = (config.seed, "shuffle", step, epoch) if shuffled else None
            for rows in tokens.minibatches(config.minibatches, order_key):
                micros = tokens.micro_batches(
                    rows,
                    advantages,
                    size=config.micro_batch_size,
                    device=config.device,
                )
                norm = build_normaliser(
                    self.reduction,
                    [mb.action_mask for mb in micros],
                    max_new_tokens=self.loss_fn.max_new_tokens,
                )
                for mb in micros:
                    t0 = time.perf_counter()
                    logprobs, entropy = token_logprobs_and_entropy(
                        self.model, mb.input_ids, mb.attention_mask, temperature=config.temperature
                    )
                    ref = None
                    if self.reference is not None and not config.kl_in_reward:
                        with torch.no_grad():  # the reference's entropy is never used
                            ref = self._reference(mb)
                    terms, bmask, extra = self.loss_fn.terms(
                        logprobs, mb.old_logprobs, mb.advantages, mb.action_mask, ref_logprobs=ref
                    )
                    if result.sequence_losses is not None and epoch == 0:
                        result.sequence_losses[mb.rows] = sequence_losses(terms, bmask).cpu()
                    loss, m = self.loss_fn.reduce(
                        terms, bmask, extra, normaliser=norm, entropy=entropy.detach()
                    )
                    t1 = time.perf_counter()
                    loss.backward()
                    result.timing["time/forward_and_loss"] += t1 - t0
                    result.timing["time/backward"] += time.perf_counter() - t1
                    w = float(mb.tokens)
                    for key, value in m.items():
                        summed[key] += value * (1.0 if key in _SUMMED else w)
                    weights += w
                t0 = time.perf_counter()
                grad_norms.append(
                    float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip))
                )
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                result.timing["time/optimizer"] += time.perf_counter() - t0
                result.optimizer_steps += 1
        for key, value in summed.items():
            if key in {"tokens", "sequences"}:  # every epoch sees the same rows
                result.metrics[key] = value / config.ppo_epochs
            elif key in {"loss", "policy_loss"}:  # each optimizer step's loss sums its micros
                result.metrics[key] = value / result.optimizer_steps
            else:
                result.metrics[key] = value / max(weights, 1.0)
        result.grad_norm = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
        return result

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
