"""The training loop: collect, compute advantages, update, sync, log.

Each step draws ``prompts_per_step`` tasks (a pure function of the run seed and the step),
rolls out K sampled branches per task (and a greedy one when the algorithm asks for it), turns
the groups into advantages with the configured algorithm, updates the policy with the token
loss under its named reduction, and pushes the new weights to the generation backend. The
parts live in their own modules and the loop only names them:

=========================  ========================================================
:mod:`.collect`            task seeds, group rollouts, dynamic sampling, the ledger
:mod:`.shaping`            optional reward terms (overlong, KL in the reward)
:mod:`.algorithms`         rewards -> advantages (an estimator, or a learned critic)
:mod:`.learner`            losses, micro-batches, optimizer, learning-rate schedule
:mod:`.backends`           the generating policy and its weight sync
:mod:`.engine_pool`        several generation engines seen as one
:mod:`.prefetch`           asynchronous generation, at most ``max_staleness`` versions old
:mod:`.drift`              engine vs trainer log-probs, and the corrections for them
:mod:`.checkpoint`         complete-or-absent checkpoints
=========================  ========================================================

Every random choice is keyed by (seed, step, ...) rather than drawn from a running stream, so
a run resumed from a checkpoint at step s makes exactly the choices the uninterrupted run made.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments

from . import distributed
from .algorithms import build_algorithm
from .backends import BACKENDS, build_policy
from .batch import RolloutBatch, TokenBatch
from .checkpoint import Checkpoints
from .collect import Collector, rollout_metrics
from .config import TrainConfig
from .diagnostics import batch_diagnostics
from .drift import correction_weights, drift_metrics
from .engine_pool import EnginePool
from .episode_log import EpisodeLog, episode_records
from .evaluate import evaluate
from .learner import Learner, Update
from .ledger import GenerationLedger
from .models import load_policy_model
from .policy import Policy
from .prefetch import Prefetcher
from .rollout import Rollouts
from .runlog import RunLog
from .shaping import RewardShaping
from .sharding import full_state_dict, load_full_state_dict, shard_model

__all__ = ["Trainer"]

StepCallback = Callable[[int, dict[str, Any]], Any]
# told "eval" before each held-out evaluation and "train" when training (re)starts, with the
# step: long evaluations (``eval_at_start``) can then be labelled by the caller
PhaseCallback = Callable[[str, int], Any]


def _takes(backend: str, option: str) -> bool:
    return option in inspect.signature(BACKENDS.lookup(backend)).parameters


# estimators whose baseline spans the whole batch (or several steps): under data parallelism
# each rank would compute it over its own share, which is not the run's estimator
_BATCH_WIDE_ESTIMATORS = frozenset({"reinforce_mean", "reinforce_ema", "grpo_batch_std"})


def _check_data_parallel(config: TrainConfig, ranks: int) -> None:
    """Refuse what data parallelism would change rather than split."""
    if config.prompts_per_step < ranks:
        raise ValueError(
            f"prompts_per_step ({config.prompts_per_step}) must be at least the number of "
            f"ranks ({ranks}): each rank trains on whole groups"
        )
    if config.estimator in _BATCH_WIDE_ESTIMATORS:
        raise ValueError(
            f"estimator {config.estimator!r} takes its baseline over the whole batch; under "
            "data parallelism each rank would see only its share: use a group estimator"
        )
    if config.dynamic_sampling:
        raise ValueError(
            "dynamic_sampling with data parallelism could leave a rank without groups; "
            "turn it off, or train on one rank"
        )


class _Silent:
    """The run log of ranks other than 0: rank 0 writes the run folder."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def close(self, exit_code: int = 0) -> None:
        pass


class Trainer:
    """Wires the parts of a run together and runs the loop; owns the run directory."""

    def __init__(
        self, config: TrainConfig, *, resume: bool = False, verifier: Any | None = None
    ) -> None:
        """``verifier``: grade with this object (any ``verify(reference, response) ->
        Outcome``) instead of the env's default or ``config.verifier_url``'s service."""
        self.config = config
        if config.threads:
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.world = distributed.setup(config.device)  # one rank, unless under torchrun
        if self.world.size > 1:
            _check_data_parallel(config, self.world.size)
        self.run_dir = Path(config.out)
        # the model first: a missing model must not leave an empty run folder behind
        self.model, self.tokenizer = load_policy_model(config.model, device=config.device)
        if self.world.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model.train()
        options = dict(config.backend_kwargs)
        if config.allow_truncated_sampling and _takes(config.backend, "allow_truncated_sampling"):
            options.setdefault("allow_truncated_sampling", True)  # one opt-in covers both
        self.policy = self._build_policy(options)
        # FSDP2 shards of the training model (the engine keeps its own whole copy)
        self.sharded = self.world.size > 1 and config.data_parallel == "shard"
        if self.sharded:
            shard_model(self.model)
        self.verifier = verifier
        if verifier is None and config.verifier_url:
            from forkgym.services import VerifierClient

            self.verifier = VerifierClient(config.verifier_url, run_id=self.run_dir.name)
        self.algorithm = build_algorithm(config, self.model)
        self.rollouts = Rollouts(
            self.make_env,
            self.policy,
            self.tokenizer,
            k=config.k,
            greedy=self.algorithm.needs_greedy,
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed,
        )
        self.collector = Collector(
            self.rollouts,
            seed=config.seed,
            prompts_per_step=config.prompts_per_step,
            dynamic_sampling=config.dynamic_sampling,
            max_resample_rounds=config.max_resample_rounds,
            world=self.world,
        )
        budget = config.max_new_tokens * self.rollouts.max_turns
        self.learner = Learner(self.model, config, max_episode_tokens=budget)
        reference = self.learner.reference_logprobs if self.learner.reference is not None else None  # fmt: skip
        self.shaping = RewardShaping(config, reference, max_episode_tokens=budget)
        self.checkpoints = Checkpoints(self.run_dir, keep=config.keep_checkpoints)
        # a backend generating with its own copy of the weights drifts from the trainer's numerics
        shared = getattr(self.policy, "model", None) is self.model
        if shared and config.max_staleness:
            raise ValueError(
                "max_staleness > 0 generates while the learner updates: the backend must "
                "generate with weights of its own, not the trainer's module"
            )
        # stale samples are corrected like engine drift: truncated importance weights unless
        # the config names its own corrections
        self.corrections = list(config.rollout_correction) or (["tis"] if config.max_staleness else [])  # fmt: skip
        measure = not shared or bool(self.corrections)  # corrections need it
        self.measure_drift = measure if config.measure_drift is None else config.measure_drift
        self.step = 0
        self.tokens_generated_total = 0  # every token generated, over the whole run
        self.prefetch: Prefetcher | None = None  # started by the first asynchronous step
        self._ahead: dict[int, tuple[RolloutBatch, GenerationLedger]] = {}  # from a checkpoint
        if resume:
            self._resume()
        self.world.barrier()  # every rank has read the checkpoint before rank 0 writes again
        log_episodes = config.log_episodes
        if log_episodes is None:
            log_episodes = config.max_staleness > 0
        self.episode_log: EpisodeLog | None = None
        if not self.world.main:  # rank 0 alone writes the run folder
            self.log: RunLog | _Silent = _Silent()
            return
        if log_episodes:
            self.episode_log = EpisodeLog(self.run_dir, resume_step=self.step if resume else None)
        self.config.save(self.run_dir / "config.yaml")
        self.log = RunLog(
            self.run_dir,
            self.run_dir.name,
            config.to_dict(),
            store_url=config.store_url,
            tensorboard=config.tensorboard,
            wandb=config.wandb,
            wandb_project=config.wandb_project,
            wandb_run_name=config.wandb_run_name,
            resume_step=self.step if resume else None,
        )

    def _build_policy(self, options: dict[str, Any]) -> Policy:
        """The configured backend, or a pool of ``generation_engines`` of them."""
        config = self.config

        def engine(seed: int) -> Policy:
            return build_policy(
                config.backend, self.model, self.tokenizer, device=config.device, seed=seed, **options
            )  # fmt: skip

        if config.generation_engines == 1:
            return engine(config.seed)
        make = lambda i: engine(config.seed + i)  # noqa: E731
        return EnginePool.build(make, config.generation_engines, seed=config.seed)

    def make_env(self) -> Any:
        kwargs = dict(self.config.env_kwargs)
        if self.verifier is not None:
            kwargs["verifier"] = self.verifier
        return gym.make(self.config.env, **kwargs)

    # -- one step -------------------------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """Collect, compute advantages, update, sync; the step's metrics."""
        config = self.config
        t_step = time.perf_counter()
        batch, ledger, collect_metrics = self._collect()
        metrics: dict[str, Any] = {**rollout_metrics(batch, ledger), **collect_metrics}
        if not batch.prompts:  # dynamic sampling found no signal at all: nothing to learn from
            self._sync(moves=False)
            return {**metrics, "tokens_trained": 0, "time/step": time.perf_counter() - t_step}

        tokens = TokenBatch.from_rollouts(batch, self.tokenizer.pad_token_id)
        if self.measure_drift:
            t0 = time.perf_counter()
            tokens, drift = self._drift(tokens)
            metrics.update(drift, **{"time/drift": time.perf_counter() - t0})

        t0 = time.perf_counter()
        shaped, shaping_metrics = self.shaping(batch, tokens)
        advantages = self.algorithm.advantages(shaped, tokens)
        time_advantages = time.perf_counter() - t0
        policy_tokens = tokens
        if advantages.train_rows is not None:  # e.g. RAFT: only the accepted rows train
            kept = advantages.train_rows.to(torch.bool)[:, None]
            policy_tokens = tokens.with_action_mask(tokens.action_mask & kept)
        trains_policy = getattr(self.algorithm, "trains_policy", None)
        moves = trains_policy is None or trains_policy(self.step)

        offload = getattr(self.policy, "offload", None)
        if offload is not None:  # a colocated engine frees its memory for the update
            offload()
        t0 = time.perf_counter()
        lr = self.learner.set_lr(self.step)
        update = self.learner.update(policy_tokens, advantages.rows, self.step) if moves else Update()  # fmt: skip
        metrics.update(self.algorithm.update(tokens, self.step))
        time_update = time.perf_counter() - t0

        t0 = time.perf_counter()
        sync, sync_wait = self._sync(moves)
        time_sync = time.perf_counter() - t0 - sync_wait
        if self.prefetch is not None:
            metrics["async/sync_wait_s"] = sync_wait
        metrics.update({f"sync/{k}": v for k, v in sync.items()})
        metrics["policy_updated"] = int(moves)

        losses = None
        if update.sequence_losses is not None:
            losses = torch.zeros(batch.rewards.shape, dtype=torch.float32)
            losses.view(-1)[tokens.index] = update.sequence_losses
        diagnostics = batch_diagnostics(
            shaped.rewards,
            batch.valid,
            advantages.grid,
            correct=batch.correct,
            lengths=batch.lengths.to(torch.float64),
            losses=losses,
            loss_metrics=update.metrics,
            **({"length_edges": config.length_edges} if config.length_edges else {}),
        )
        metrics.update(advantages.metrics)
        metrics.update(shaping_metrics)
        metrics.update({f"diag/{k}": v for k, v in diagnostics.items()})
        metrics.update({f"loss/{k}": v for k, v in update.metrics.items()})
        valid = batch.valid
        metrics.update(
            {
                "reward_mean": float(batch.rewards[valid].mean()) if valid.any() else None,
                "accuracy": float(batch.correct.float().mean()),
                "tokens_trained": update.tokens_trained,
                "grad_norm": update.grad_norm,
                "lr": lr,
                "reduction": self.learner.reduction,
                "weight_version": self.policy.weight_version,
                "time/advantages": time_advantages,
                "time/update": time_update,
                **update.timing,
                "time/sync": time_sync,
                "time/step": time.perf_counter() - t_step,
            }
        )
        metrics["tokens_per_s"] = metrics["tokens_generated"] / metrics["time/step"]
        return metrics

    def _collect(self) -> tuple[RolloutBatch, GenerationLedger, dict[str, Any]]:
        """This step's batch: collected now, or (asynchronous mode) generated ahead, without
        the groups more than ``max_staleness`` versions old."""
        if not self.config.max_staleness:
            batch, ledger = self.collector.collect(self.step)
            self._log_episodes(batch, None)
            return batch, ledger, {}
        if self.prefetch is None:
            self.prefetch = Prefetcher(
                self.collector.collect,
                max_staleness=self.config.max_staleness,
                first_step=self.step,
                end_step=self.config.steps,
                ready=self._ahead,
            )
            self._ahead = {}
        batch, ledger, waited = self.prefetch.get(self.step)
        version = self.policy.weight_version  # the learner's weights (no sync runs meanwhile)
        oldest = [min(ep.weight_version for ep in g.branches) for g in batch.groups]
        staleness = torch.tensor([version - v for v in oldest], dtype=torch.float64)
        keep = staleness <= self.config.max_staleness
        self._log_episodes(batch, set(keep.nonzero().flatten().tolist()))
        metrics = {
            "async/wait_s": waited,
            "async/staleness_mean": float(staleness.mean()) if len(oldest) else 0.0,
            "async/staleness_max": int(staleness.max()) if len(oldest) else 0,
            "async/dropped_stale_groups": int((~keep).sum()),
        }
        if not keep.all():  # never by the schedule; the bound is kept whatever happened
            batch = batch.select(keep)
        return batch, ledger, metrics

    def _log_episodes(self, batch: RolloutBatch, kept: set[int] | None) -> None:
        if self.episode_log is not None:
            records = episode_records(batch, self.step + 1, self.policy.weight_version, kept)
            self.episode_log.log(records)

    def _sync(self, moves: bool) -> tuple[dict[str, float], float]:
        """Push the new weights to the engine (if the policy moved); asynchronously, once the
        batches that must see the old weights are generated. Returns the push's costs and the
        seconds spent waiting for those batches."""

        def push() -> dict[str, float]:
            if not moves:
                return {}
            return dict(self.policy.sync_weights(self._engine_weights()) or {})

        if self.prefetch is None:
            return push(), 0.0
        return self.prefetch.finished(self.step, push)

    def _engine_weights(self) -> torch.nn.Module | dict[str, Any]:
        """What the engine loads: the model, or (sharded) the whole weights every rank
        gathers from the shards for its own engine."""
        return full_state_dict(self.model) if self.sharded else self.model

    def _engine(self) -> contextlib.AbstractContextManager[Any]:
        """The generation engine to itself (asynchronous mode shares it with the producer)."""
        return self.prefetch.engine if self.prefetch is not None else contextlib.nullcontext()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stop generation and shut the engine down (a vLLM engine frees its memory; one in a
        process of its own ends it). ``with Trainer(...) as trainer:`` does it however the
        block ends."""
        self.close()
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        """Stop asynchronous generation (a batch in progress is finished first)."""
        if self.prefetch is not None:
            self.prefetch.close()
            self.prefetch = None
        if self.episode_log is not None:
            self.episode_log.close()
            self.episode_log = None

    def _drift(self, tokens: TokenBatch) -> tuple[TokenBatch, dict[str, float]]:
        """The engine's behaviour log-probs against the trainer's (raw statistics), and the
        batch with the configured corrections applied (agents/drift.py)."""
        config = self.config
        current = self.learner.current_logprobs(tokens)
        metrics = drift_metrics(current, tokens.old_logprobs, tokens.action_mask)
        if self.corrections:
            weights, stats = correction_weights(
                current,
                tokens.old_logprobs,
                tokens.action_mask,
                self.corrections,
                tis_clamp=config.tis_clamp,
                seq_band=config.seq_mask_band,
                geo_band=config.geo_mask_band,
            )
            metrics.update(stats)
            tokens = tokens.with_correction(current, weights)
        return tokens, metrics

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics, with the seconds they took as ``time/eval``."""
        t0 = time.perf_counter()
        with self._engine():  # asynchronous mode: not while the producer generates
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

    def run(
        self,
        stop: Callable[[int, dict[str, Any]], bool] | None = None,
        on_step: StepCallback | None = None,
        on_phase: PhaseCallback | None = None,
    ) -> dict[str, Any]:
        """Train to ``config.steps``; evaluate, checkpoint and log on the way.

        ``stop(step, metrics) -> bool`` may end the run early (after that step's evaluation,
        log and checkpoint); ``config.time_budget_s`` does the same on wall-clock time, and
        ``config.max_tokens_generated`` on generated tokens (the run overshoots the budget by
        less than one step's tokens). ``config.eval_every_tokens`` adds an evaluation at the
        first step at or past each multiple of that many generated tokens.
        ``on_step(step, metrics)`` sees every logged step (the CLI draws its progress bar);
        ``on_phase(phase, step)`` is told ``"eval"`` before each held-out evaluation and
        ``"train"`` when training goes on (the CLI labels its bar with it).
        """
        config = self.config

        def phase(name: str) -> None:
            if on_phase is not None and self.world.main:
                on_phase(name, self.step)

        def held_out() -> dict[str, Any]:
            """Rank 0 evaluates; the other ranks wait for it."""
            result = self.evaluate() if self.world.main else {}
            self.world.barrier()
            return result

        started = time.perf_counter()
        last: dict[str, Any] = {}
        if (
            self.step == 0
            and config.eval_at_start
            and (config.eval_every or config.eval_every_tokens)
        ):
            first = {"tokens_generated": 0, "tokens_trained": 0, "reward_mean": None}
            phase("eval")
            self.log.log(0, {**first, **held_out()})
        phase("train")
        budget = config.max_tokens_generated
        try:
            while self.step < config.steps and (
                budget is None or self.tokens_generated_total < budget
            ):
                metrics = self.train_step()
                self.step += 1
                before = self.tokens_generated_total
                generated = int(metrics.get("tokens_generated") or 0)
                # the budget counts every rank's tokens; the rest is rank 0's
                if self.world.size > 1:
                    generated = int(self.world.total(generated))
                    metrics.update(tokens_generated=generated, data_parallel_ranks=self.world.size)
                self.tokens_generated_total += generated
                metrics["tokens_generated_total"] = self.tokens_generated_total
                final = (
                    self.step == config.steps
                    or (budget is not None and self.tokens_generated_total >= budget)
                    or (
                        config.time_budget_s is not None
                        and time.perf_counter() - started >= config.time_budget_s
                    )
                )
                every = config.eval_every_tokens
                crossed = (
                    every is not None and self.tokens_generated_total // every > before // every
                )
                by_steps = config.eval_every and self.step % config.eval_every == 0
                if (config.eval_every or every) and (by_steps or crossed or final):
                    phase("eval")
                    metrics.update(held_out())
                    if not final:
                        phase("train")
                final = final or (stop is not None and self.world.main and stop(self.step, metrics))
                final = self.world.any(final)  # every rank stops at the same step
                self.log.log(self.step, metrics)
                last = metrics
                if final or (config.checkpoint_every and self.step % config.checkpoint_every == 0):
                    self._check_ranks_agree()
                    state = self._checkpoint_state()  # every rank: gathers when sharded
                    if self.world.main:
                        self.save_checkpoint(state)
                    self.world.barrier()
                if on_step is not None and self.world.main:
                    on_step(self.step, metrics)
                if final:
                    break
        finally:
            self.close()  # asynchronous generation stops with the run
        self.log.close()
        return last

    # -- checkpoints ----------------------------------------------------------------------------

    def _check_ranks_agree(self) -> None:
        """Under data parallelism, every rank's weights must be rank 0's (they take the same
        steps from the same start); checked at each checkpoint, which holds rank 0's only."""
        if self.world.size == 1 or self.sharded:  # a sharded model has one copy of each shard
            return
        with torch.no_grad():
            checksum = sum(float(p.double().sum()) for p in self.model.parameters())
        if not self.world.agree(checksum):
            raise RuntimeError(
                f"step {self.step}: the data-parallel ranks' weights differ; a rank trained on "
                "something the others did not (see agents/distributed.py)"
            )

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint needs from every rank: under sharding, the whole weights and
        optimizer state are gathered (onto rank 0) by all ranks together."""
        state: dict[str, Any] = {"optimizer": self.learner.state_dict()}
        if self.sharded:
            state["model_state"] = full_state_dict(self.model, rank0_only=True)
        state["prefetched"] = self._prefetched()
        return state

    def save_checkpoint(self, state: dict[str, Any] | None = None) -> Path:
        state = self._checkpoint_state() if state is None else state
        return self.checkpoints.save(
            self.step,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=state["optimizer"],
            model_state=state.get("model_state"),
            algorithm=self.algorithm.state_dict(),
            weight_version=self.policy.weight_version,
            counters={"tokens_generated_total": self.tokens_generated_total},
            prefetched=state["prefetched"],
        )

    def _prefetched(self) -> dict[str, Any] | None:
        """Asynchronous mode: the batches generated ahead with older weights than the
        checkpoint's, so that a resumed run trains on exactly what this one will."""
        if not self.config.max_staleness:
            return None
        ahead = self.prefetch.pending() if self.prefetch is not None else self._ahead
        mine = {
            str(step): {"batch": batch.to_dict(), "ledger": asdict(ledger)}
            for step, (batch, ledger) in ahead.items()
        }
        # each data-parallel rank generated its own share ahead: rank 0 keeps them all
        ranks = self.world.gather(mine)
        return {
            "max_staleness": self.config.max_staleness,
            "world_size": self.world.size,
            "ranks": ranks,
        }

    def _resume(self) -> None:
        restored = self.checkpoints.load_latest(
            self.model,
            load=(lambda w: load_full_state_dict(self.model, w)) if self.sharded else None,
        )
        self.learner.load_state_dict(restored.optimizer)
        self.algorithm.load_state_dict(restored.algorithm)
        self.step = restored.step
        self.tokens_generated_total = int(restored.counters.get("tokens_generated_total", 0))
        torch.set_rng_state(restored.torch_rng)
        self.policy.sync_weights(self._engine_weights(), version=restored.weight_version)
        ahead = restored.prefetched
        # batches generated ahead under another max_staleness (or for another number of
        # ranks' shares) would not be this run's: they are generated again
        if (
            ahead is not None
            and ahead.get("max_staleness") == self.config.max_staleness
            and ahead.get("world_size") == self.world.size
        ):
            self._ahead = {
                int(step): (RolloutBatch.from_dict(b["batch"]), GenerationLedger(**b["ledger"]))
                for step, b in ahead["ranks"][self.world.rank].items()
            }
