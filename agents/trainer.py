"""The critic-free trainer: one loop for every estimator.

Each step: draw ``prompts_per_step`` task seeds (a pure function of the run seed and the step),
roll out K sampled branches per task (and a greedy one for ReMax) in batched calls, read each
episode's outcome, compute advantages with the estimator (infrastructure failures are invalid:
out of every baseline, advantage 0, and out of the loss), build the token loss under the
declared reduction with one normaliser per optimizer step, step AdamW with gradient clipping
(optionally several PPO epochs over mini-batches), and sync the weights to the generator.

Every random choice is keyed by (seed, step, ...) rather than drawn from a running stream, so
a run resumed from a checkpoint at step s makes exactly the choices the uninterrupted run made.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.verifiers import Status

from .batching import micro_batches
from .config import TrainConfig
from .diagnostics import batch_diagnostics
from .estimators import get_estimator
from .losses import get_loss
from .reductions import build_normaliser
from .rollout import Episode, RolloutBatch, Rollouts, request_seed, task_seeds
from .runlog import RunLog
from .sampling import GenerationLedger, groups_with_signal
from .schedules import lr_factor

__all__ = ["Trainer"]


def _rewards_grid(groups: list, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = torch.full((len(groups), k), math.nan, dtype=torch.float64)
    valid = torch.zeros((len(groups), k), dtype=torch.bool)
    for g, group in enumerate(groups):
        for b, ep in enumerate(group.sampled):
            if ep.valid:
                rewards[g, b], valid[g, b] = ep.reward, True
    return rewards, valid


class Trainer:
    """Owns the model, the optimizer, the rollouts and the run directory."""

    def __init__(self, config: TrainConfig, *, resume: bool = False) -> None:
        from .hf_policy import HFPolicy
        from .models import load_policy_model

        self.config = config
        if config.threads:
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.run_dir = Path(config.out)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model, self.tokenizer = load_policy_model(config.model, device=config.device)
        self.model.train()
        self.policy = HFPolicy(self.model, self.tokenizer, device=config.device, seed=config.seed)
        self.verifier = None
        if config.verifier_url:
            from forkgym.services import VerifierClient

            self.verifier = VerifierClient(config.verifier_url, run_id=self.run_dir.name)
        self.rollouts = self._rollouts(k=config.k, greedy=config.needs_greedy)
        self.estimator = get_estimator(config.estimator, **config.estimator_kwargs)
        budget = config.max_new_tokens * self._max_turns()
        self.loss_fn = get_loss(
            config.loss,
            reduction=config.reduction,
            max_new_tokens=budget,
            kl_coef=config.kl_coef,
            kl_estimator=config.kl_estimator,
            **config.loss_kwargs,
        )
        self.reduction = self.loss_fn.reduction
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.lr,
            betas=config.betas,
            weight_decay=config.weight_decay,
        )
        self.reference = copy.deepcopy(self.model).eval() if config.kl_coef > 0 else None
        self.step = 0
        self.timing: Counter[str] = Counter()
        if resume:
            self._load_latest()
        self.config.save(self.run_dir / "config.yaml")
        self.log = RunLog(
            self.run_dir,
            self.run_dir.name,
            config.to_dict(),
            store_url=config.store_url,
            tensorboard=config.tensorboard,
            resume_step=self.step if resume else None,
        )

    # -- set-up helpers --------------------------------------------------------------------

    def make_env(self) -> Any:
        kwargs = dict(self.config.env_kwargs)
        if self.verifier is not None:
            kwargs["verifier"] = self.verifier
        return gym.make(self.config.env, **kwargs)

    def _rollouts(self, k: int, greedy: bool) -> Rollouts:
        return Rollouts(
            self.make_env,
            self.policy,
            self.tokenizer,
            k=k,
            greedy=greedy,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_new_tokens=self.config.max_new_tokens,
            seed=self.config.seed,
        )

    def _max_turns(self) -> int:
        return int(getattr(self.make_env().unwrapped, "max_turns", 1))

    # -- one step -----------------------------------------------------------------------------

    def collect(self) -> tuple[RolloutBatch, GenerationLedger]:
        """This step's groups; with dynamic sampling, rounds until enough have a signal.

        The ledger records every round: tokens sampled, accepted and discarded, greedy tokens.
        """
        config = self.config
        ledger = GenerationLedger()
        stream = "train"
        batch = self.rollouts.collect(
            task_seeds(config.seed, stream, self.step, config.prompts_per_step), stream, self.step
        )
        if not config.dynamic_sampling:
            self._account(batch.groups, ledger, torch.ones(len(batch.groups), dtype=torch.bool))
            return batch, ledger
        total, kept = batch, []
        for round_ in range(config.max_resample_rounds + 1):
            rewards, valid = _rewards_grid(batch.groups, config.k)
            keep = groups_with_signal(rewards, valid)
            self._account(batch.groups, ledger, keep)
            kept += [g for g, k in zip(batch.groups, keep.tolist(), strict=True) if k]
            if len(kept) >= config.prompts_per_step or round_ == config.max_resample_rounds:
                break
            stream = f"train-resample-{round_ + 1}"
            batch = self.rollouts.collect(
                task_seeds(config.seed, stream, self.step, config.prompts_per_step),
                stream,
                self.step,
            )
            total.generate_s += batch.generate_s
            total.env_s += batch.env_s
            total.tokens_generated += batch.tokens_generated
            total.greedy_tokens += batch.greedy_tokens
            total.turns += batch.turns
        total.groups = kept[: config.prompts_per_step]
        return total, ledger

    def _account(self, groups: list, ledger: GenerationLedger, keep: torch.Tensor) -> None:
        lengths = torch.tensor(
            [[ep.generated_tokens for ep in g.sampled] for g in groups], dtype=torch.int64
        )
        valid = torch.tensor([[ep.valid for ep in g.sampled] for g in groups], dtype=torch.bool)
        greedy = None
        if self.config.needs_greedy:
            greedy = torch.tensor([g.greedy.generated_tokens for g in groups], dtype=torch.int64)
        ledger.record(
            lengths.reshape(len(groups), -1),
            keep,
            valid=valid.reshape(len(groups), -1),
            greedy_lengths=greedy,
        )

    def train_step(self) -> dict[str, Any]:
        config = self.config
        t_step = time.perf_counter()
        batch, ledger = self.collect()
        groups = batch.groups
        metrics: dict[str, Any] = {}
        if not groups:  # dynamic sampling found no signal at all: nothing to learn from
            metrics.update(self._rollout_metrics(batch, ledger))
            metrics.update({"tokens_trained": 0, "time/step": time.perf_counter() - t_step})
            return metrics

        t0 = time.perf_counter()
        rewards, valid = _rewards_grid(groups, config.k)
        greedy = greedy_valid = None
        if config.needs_greedy:
            greedy = torch.tensor(
                [g.greedy.reward if g.greedy.valid else math.nan for g in groups],
                dtype=torch.float64,
            )
            greedy_valid = torch.tensor([g.greedy.valid for g in groups])
        advantages, est_stats = self.estimator(rewards, valid, greedy, greedy_valid)
        time_estimator = time.perf_counter() - t0

        # The loss sees valid sampled episodes only: infrastructure failures are out of it.
        train: list[Episode] = []
        adv: list[float] = []
        for g, group in enumerate(groups):
            for b, ep in enumerate(group.sampled):
                if ep.valid:
                    train.append(ep)
                    adv.append(float(advantages[g, b]))

        t0 = time.perf_counter()
        self.timing = Counter()
        lr = self._set_lr()
        loss_metrics, grad_norm, trained = self._update(train, adv) if train else ({}, 0.0, 0)
        time_update = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.policy.sync_weights(None)  # the HF backend shares the model: this bumps the version
        time_sync = time.perf_counter() - t0

        correct = torch.tensor(
            [
                [ep.outcome is not None and ep.outcome.status is Status.CORRECT for ep in g.sampled]
                for g in groups
            ]
        )
        lengths = torch.tensor(
            [[ep.generated_tokens for ep in g.sampled] for g in groups], dtype=torch.float64
        )
        diagnostics = batch_diagnostics(
            rewards, valid, advantages, correct=correct, lengths=lengths, loss_metrics=loss_metrics
        )
        metrics.update(self._rollout_metrics(batch, ledger))
        metrics.update({f"est/{k}": v for k, v in est_stats.items()})
        metrics.update({f"diag/{k}": v for k, v in diagnostics.items()})
        metrics.update({f"loss/{k}": v for k, v in loss_metrics.items()})
        metrics.update(
            {
                "reward_mean": float(rewards[valid].mean()) if valid.any() else None,
                "accuracy": float(correct.float().mean()),
                "tokens_trained": trained,
                "grad_norm": grad_norm,
                "lr": lr,
                "reduction": self.reduction,
                "weight_version": self.policy.weight_version,
                "time/estimator": time_estimator,
                "time/update": time_update,
                **self.timing,
                "time/sync": time_sync,
                "time/step": time.perf_counter() - t_step,
            }
        )
        metrics["tokens_per_s"] = metrics["tokens_generated"] / metrics["time/step"]
        return metrics

    def _set_lr(self) -> float:
        """This step's learning rate, a function of the step alone (resumes exactly)."""
        config = self.config
        lr = config.lr * lr_factor(
            config.lr_schedule,
            self.step,
            config.lr_decay_steps or config.steps,
            config.warmup_steps,
            config.lr_final_ratio,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _update(
        self, episodes: list[Episode], advantages: list[float]
    ) -> tuple[dict[str, float], float, int]:
        """PPO epochs over mini-batches; one optimizer step (and one normaliser) each."""
        from .hf_policy import token_logprobs

        config = self.config
        summed: Counter[str] = Counter()
        weights = 0.0
        grad_norms = []
        optimizer_steps = 0
        order = list(range(len(episodes)))
        for epoch in range(config.ppo_epochs):
            if epoch > 0 or config.minibatches > 1:
                gen = torch.Generator().manual_seed(
                    request_seed(config.seed, "shuffle", self.step, epoch) % 2**63
                )
                order = torch.randperm(len(episodes), generator=gen).tolist()
            size = math.ceil(len(order) / config.minibatches)
            for start in range(0, len(order), size):
                rows = order[start : start + size]
                micros = micro_batches(
                    [episodes[i] for i in rows],
                    [advantages[i] for i in rows],
                    size=config.micro_batch_size,
                    pad_id=self.tokenizer.pad_token_id,
                    device=config.device,
                )
                norm = build_normaliser(
                    self.reduction,
                    [mb.action_mask for mb in micros],
                    max_new_tokens=self.loss_fn.max_new_tokens,
                )
                for mb in micros:
                    t0 = time.perf_counter()
                    logprobs, entropy = self._logprobs_and_entropy(self.model, mb)
                    ref = None
                    if self.reference is not None:
                        with torch.no_grad():  # the reference's entropy is never used
                            ref = token_logprobs(
                                self.reference,
                                mb.input_ids,
                                mb.attention_mask,
                                temperature=config.temperature,
                            )
                    loss, m = self.loss_fn(
                        logprobs,
                        mb.old_logprobs,
                        mb.advantages,
                        mb.action_mask,
                        ref_logprobs=ref,
                        entropy=entropy.detach(),
                        normaliser=norm,
                    )
                    t1 = time.perf_counter()
                    loss.backward()
                    self.timing["time/forward_and_loss"] += t1 - t0
                    self.timing["time/backward"] += time.perf_counter() - t1
                    w = float(mb.tokens)
                    for key, value in m.items():
                        summed[key] += value * (
                            1.0 if key in {"loss", "tokens", "sequences", "policy_loss"} else w
                        )
                    weights += w
                t0 = time.perf_counter()
                grad_norms.append(
                    float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip))
                )
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.timing["time/optimizer"] += time.perf_counter() - t0
                optimizer_steps += 1
        out = {}
        for key, value in summed.items():
            if key in {"tokens", "sequences"}:
                out[key] = value / config.ppo_epochs
            elif key in {
                "loss",
                "policy_loss",
            }:  # each optimizer step's loss sums its micro-batches
                out[key] = value / optimizer_steps
            else:
                out[key] = value / max(weights, 1.0)
        trained = sum(ep.generated_tokens for ep in episodes)
        return out, (sum(grad_norms) / len(grad_norms) if grad_norms else 0.0), trained

    def _logprobs_and_entropy(
        self, model: torch.nn.Module, mb: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs at the sampling temperature (as the behaviour ones were) and
        the policy's entropy, from one forward pass."""
        from .hf_policy import token_logprobs_and_entropy

        return token_logprobs_and_entropy(
            model, mb.input_ids, mb.attention_mask, temperature=self.config.temperature
        )

    def _rollout_metrics(self, batch: RolloutBatch, ledger: GenerationLedger) -> dict[str, Any]:
        episodes = [ep for g in batch.groups for ep in g.sampled]
        statuses = Counter(ep.outcome.status.value if ep.outcome else "none" for ep in episodes)
        spans = [g.span_s for g in batch.groups]
        diverged = [g.greedy_diverged for g in batch.groups if g.greedy_diverged is not None]
        out: dict[str, Any] = {f"status/{s.value}": statuses.get(s.value, 0) for s in Status}
        out.update(
            {
                "episodes": len(episodes),
                "infra_failures": sum(not ep.valid for ep in episodes),
                "truncated_by_tokens": sum(ep.truncated for ep in episodes),
                "tokens_generated": batch.tokens_generated,
                "tokens_generated_greedy": batch.greedy_tokens,
                "turns": batch.turns,
                "time/generate": batch.generate_s,
                "time/env_and_verify": batch.env_s,
                "group_span_s_mean": sum(spans) / len(spans) if spans else 0.0,
                "barrier_idle_s": sum(g.barrier_idle_s for g in batch.groups),
            }
        )
        if diverged:
            out["greedy_diverged_frac"] = sum(diverged) / len(diverged)
        out.update(ledger.report("gen/"))
        return out

    # -- evaluation -----------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics, with the seconds they took as ``time/eval``."""
        from .evaluate import evaluate

        t0 = time.perf_counter()
        out = evaluate(
            self.policy,
            self.tokenizer,
            self.make_env,
            episodes=self.config.eval_episodes,
            seed=self.config.eval_seed,
            k=self.config.eval_k,
            max_new_tokens=self.config.max_new_tokens,
            temperature=self.config.temperature,
        )
        return {**out, "time/eval": time.perf_counter() - t0}

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: Any = None) -> dict[str, Any]:
        """Train to ``config.steps``; evaluate, checkpoint and log on the way.

        ``stop(step, metrics) -> bool`` may end the run early (after that step's evaluation,
        log and checkpoint); ``config.time_budget_s`` does the same on wall-clock time.
        """
        started = time.perf_counter()
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        config = self.config
        last: dict[str, Any] = {}
        progress = Progress(
            TextColumn("step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            disable=not config.progress,
        )
        with progress:
            task = progress.add_task("train", total=config.steps, completed=self.step, info="")
            if self.step == 0 and config.eval_every:
                self.log.log(
                    0,
                    {
                        "tokens_generated": 0,
                        "tokens_trained": 0,
                        "reward_mean": None,
                        **self.evaluate(),
                    },
                )
            while self.step < config.steps:
                metrics = self.train_step()
                self.step += 1
                final = self.step == config.steps or (
                    config.time_budget_s is not None
                    and time.perf_counter() - started >= config.time_budget_s
                )
                if config.eval_every and (self.step % config.eval_every == 0 or final):
                    metrics.update(self.evaluate())
                final = final or (stop is not None and stop(self.step, metrics))
                self.log.log(self.step, metrics)
                last = metrics
                if final or (config.checkpoint_every and self.step % config.checkpoint_every == 0):
                    self.save_checkpoint()
                info = (
                    f"reward {metrics.get('reward_mean') or 0:.3f}  acc {metrics.get('accuracy', 0):.3f}  "
                    f"{metrics.get('tokens_per_s', 0):,.0f} tok/s"
                )
                if "eval_accuracy" in metrics:
                    info += f"  eval {metrics['eval_accuracy']:.3f}"
                progress.update(task, completed=self.step, info=info)
                if final:
                    break
        self.log.close()
        return last

    # -- checkpoints ----------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        path = self.run_dir / "checkpoints" / f"step_{self.step:07d}"
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        state = {
            "step": self.step,
            "weight_version": self.policy.weight_version,
            "estimator": self.estimator.state_dict()
            if hasattr(self.estimator, "state_dict")
            else None,
            "torch_rng": torch.get_rng_state().tolist(),
        }
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)  # a checkpoint directory is complete or absent
        kept = sorted((self.run_dir / "checkpoints").glob("step_*[0-9]"))
        for old in kept[: -max(1, self.config.keep_checkpoints)]:
            shutil.rmtree(old)
        return path

    def _load_latest(self) -> None:
        checkpoints = sorted((self.run_dir / "checkpoints").glob("step_*[0-9]"))
        if not checkpoints:
            raise FileNotFoundError(
                f"no checkpoint to resume from in {self.run_dir / 'checkpoints'}"
            )
        path = checkpoints[-1]
        from safetensors.torch import load_file

        weights = load_file(str(path / "model.safetensors"))
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:  # tied lm_head is not stored
            raise RuntimeError(
                f"checkpoint {path} does not match the model: {missing} {unexpected}"
            )
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        state = json.loads((path / "trainer_state.json").read_text())
        self.step = int(state["step"])
        torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
        if state.get("estimator") is not None and hasattr(self.estimator, "load_state_dict"):
            self.estimator.load_state_dict(state["estimator"])
        while self.policy.weight_version < int(state["weight_version"]):
            self.policy.sync_weights(None)
