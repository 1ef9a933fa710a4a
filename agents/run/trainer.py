"""The training loop: collect, compute advantages, update, sync, log.

Each step takes its batch from generation (``prompts_per_step`` tasks, a pure function of the
run seed and the step, K sampled branches each and a greedy one when the algorithm asks for
it), turns it into the loss's rows, scores the engine's samples with the trainer's own
weights when they may differ, shapes the rewards, turns the groups into advantages with the
configured algorithm, updates the policy with the token loss under its named reduction, and
pushes the new weights to the engines. Each stage has one owner, and the loop only names
them, each step's stages timed under their names (``time/gen``, ``time/drift``,
``time/reward``, ``time/adv``, ``time/update``, ``time/sync``):

=========================  ========================================================
:mod:`.generation`         the engines, each step's batch (synchronous or ahead of the
                           learner), the weights pushed to them, ``episodes.jsonl``
:mod:`.batch`              the step's ``RolloutBatch`` grids and ``TokenBatch`` rows
:mod:`.shaping`            optional reward terms (overlong, KL in the reward)
:mod:`.algorithms`         rewards -> advantages (an estimator, or a learned critic)
:mod:`.learner`            drift corrections, losses, micro-batches, optimizer, learning
                           rate, the model's weights for engines and checkpoints
:mod:`.distributed`        the ranks of a data-parallel run and how the model lies on them
:mod:`.checkpoint`         complete-or-absent checkpoints
=========================  ========================================================

Every random choice is keyed by (seed, step, ...) rather than drawn from a running stream, so
a run resumed from a checkpoint at step s makes exactly the choices the uninterrupted run made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import distributed
from ..advantages.algorithms import build_algorithm
from ..advantages.shaping import RewardShaping
from ..batch import TokenBatch
from ..generation.collect import rollout_metrics
from ..generation.stage import build_engines, build_generation
from ..learner.diagnostics import batch_diagnostics
from ..learner.stage import Learner
from ..models import load_policy_model
from ..timing import Stages
from .checkpoint import Checkpoints
from .config import TrainConfig
from .runlog import open_run_log

__all__ = ["Trainer"]

StepCallback = Callable[[int, dict[str, Any]], Any]
# told "eval" before each held-out evaluation and "train" when training (re)starts, with the
# step: long evaluations (``eval_at_start``) can then be labelled by the caller
PhaseCallback = Callable[[str, int], Any]


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
        # one rank, unless under torchrun
        self.world = distributed.setup(config.device, config.data_parallel)
        config.check_ranks(self.world.size)
        self.run_dir = Path(config.out)
        # the model first: a missing model must not leave an empty run folder behind
        self.model, self.tokenizer = load_policy_model(config.model, device=config.device)
        self.world.on_main(lambda: self.run_dir.mkdir(parents=True, exist_ok=True), None)
        self.model.train()
        policy = build_engines(config, self.model, self.tokenizer)  # whole copies, first
        self.world.place(self.model)  # FSDP2 shards when the run shards the model
        self.algorithm = build_algorithm(config, self.model)
        self.generation = build_generation(
            config, policy, self.tokenizer, world=self.world,
            greedy=self.algorithm.needs_greedy, values=self.algorithm.fork_values,
            states=self.algorithm.needs_states,
            verifier=verifier, run_id=self.run_dir.name,
        )  # fmt: skip
        budget = self.generation.max_episode_tokens
        self.learner = Learner(self.model, config, max_episode_tokens=budget, world=self.world)
        reference = self.learner.reference_logprobs if self.learner.reference is not None else None  # fmt: skip
        self.shaping = RewardShaping(config, reference, max_episode_tokens=budget)
        self.checkpoints = Checkpoints(self.run_dir, keep=config.keep_checkpoints)
        self.step = 0
        self.tokens_generated_total = 0  # every token generated, over the whole run
        resume_step = self._resume() if resume else None
        self.world.barrier()  # every rank has read the checkpoint before rank 0 writes again
        self.generation.open_episode_log(self.run_dir, resume_step)
        self.log = open_run_log(config, main=self.world.main, resume_step=resume_step)

    # -- one step -------------------------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """One step along the data path (gen, drift, reward, adv, update, sync); its metrics."""
        stages = Stages()
        with stages("gen"):
            batch, ledger, generated = self.generation.batch(self.step)
        metrics: dict[str, Any] = {**rollout_metrics(batch, ledger), **generated}
        if not batch.prompts:  # dynamic sampling found no signal at all: nothing to learn from
            with stages("sync"):
                self.generation.push(self.step, None)
            return {**metrics, "tokens_trained": 0, **stages.metrics(total="step")}

        tokens = TokenBatch.from_rollouts(batch, self.tokenizer.pad_token_id)
        with stages("drift"):  # the trainer's log-probs of the engine's samples, if they differ
            tokens, drift = self.learner.correct_drift(tokens)
        with stages("reward"):
            shaped, shaping = self.shaping(batch, tokens)
        with stages("adv"):
            advantages = self.algorithm.advantages(shaped, tokens)
        moves = self.algorithm.trains_policy(self.step)  # not in a critic's warm-up
        self.generation.offload()  # a colocated engine frees its memory for the update
        with stages("update"):
            update = self.learner.update(
                advantages.trained(tokens), advantages.rows, self.step, train=moves
            )
            owned = self.algorithm.update(tokens, self.step)  # a critic's own update
        with stages("sync"):
            synced = self.generation.push(self.step, self.learner.engine_weights if moves else None)  # fmt: skip

        losses = None
        if update.sequence_losses is not None:
            losses = tokens.to_grid(update.sequence_losses, batch.rewards.shape)
        diagnostics = batch_diagnostics(
            shaped.rewards,
            batch.valid,
            advantages.grid,
            correct=batch.correct,
            lengths=batch.lengths.to(torch.float64),
            losses=losses,
            loss_metrics=update.metrics,
            **({"length_edges": self.config.length_edges} if self.config.length_edges else {}),
        )
        valid = batch.valid
        metrics.update(drift, **owned, **synced, **advantages.metrics, **shaping)
        metrics.update({f"diag/{k}": v for k, v in diagnostics.items()})
        metrics.update({f"loss/{k}": v for k, v in update.metrics.items()})
        metrics.update(
            {
                "policy_updated": int(moves),
                "reward_mean": float(batch.rewards[valid].mean()) if valid.any() else None,
                "accuracy": float(batch.correct.float().mean()),
                "tokens_trained": update.tokens_trained,
                "grad_norm": update.grad_norm,
                "lr": update.lr,
                "reduction": self.learner.reduction,
                "weight_version": self.generation.policy.weight_version,
                **update.timing,
                **stages.metrics(total="step"),
            }
        )
        metrics["tokens_per_s"] = metrics["tokens_generated"] / metrics["time/step"]
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics, with the seconds they took as ``time/eval``."""
        return self.generation.evaluate()

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
        ``"train"`` when training goes on (the CLI labels its bar with it). Under data
        parallelism the callbacks run on rank 0, which alone evaluates, logs and saves.
        """
        config, world = self.config, self.world
        stop, on_step, on_phase = (world.main_only(f) for f in (stop, on_step, on_phase))

        def phase(name: str) -> None:
            if on_phase is not None:
                on_phase(name, self.step)

        def held_out() -> dict[str, Any]:
            return world.on_main(self.evaluate, {})

        started = time.perf_counter()
        last: dict[str, Any] = {}
        if self.step == 0 and config.eval_at_start and (config.eval_every or config.eval_every_tokens):  # fmt: skip
            first = {"tokens_generated": 0, "tokens_trained": 0, "reward_mean": None}
            phase("eval")
            self.log.log(0, {**first, **held_out()})
        phase("train")
        budget, every = config.max_tokens_generated, config.eval_every_tokens
        try:
            while self.step < config.steps and (budget is None or self.tokens_generated_total < budget):  # fmt: skip
                metrics = self.train_step()
                self.step += 1
                before = self.tokens_generated_total
                # the budget counts every rank's tokens; the rest is rank 0's
                metrics.update(world.step_metrics(int(metrics.get("tokens_generated") or 0)))
                self.tokens_generated_total += metrics["tokens_generated"]
                metrics["tokens_generated_total"] = self.tokens_generated_total
                final = (
                    self.step == config.steps
                    or (budget is not None and self.tokens_generated_total >= budget)
                    or (
                        config.time_budget_s is not None
                        and time.perf_counter() - started >= config.time_budget_s
                    )
                )
                crossed = every is not None and self.tokens_generated_total // every > before // every  # fmt: skip
                by_steps = config.eval_every and self.step % config.eval_every == 0
                if (config.eval_every or every) and (by_steps or crossed or final):
                    phase("eval")
                    metrics.update(held_out())
                    if not final:
                        phase("train")
                final = world.any(final or (stop is not None and stop(self.step, metrics)))
                self.log.log(self.step, metrics)
                last = metrics
                if final or (config.checkpoint_every and self.step % config.checkpoint_every == 0):
                    self.learner.check_replicas(world, self.step)
                    state = self._checkpoint_state()  # every rank: collectives inside
                    world.on_main(lambda state=state: self.save_checkpoint(state), None)
                if on_step is not None:
                    on_step(self.step, metrics)
                if final:
                    break
        finally:
            self.close()  # generation ahead of the learner stops with the run
        self.log.close()
        return last

    # -- checkpoints ----------------------------------------------------------------------------

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint needs from every rank: the learner's optimizer (and, sharded, the
        whole weights), and the batches generated ahead of the learner."""
        return {**self.learner.checkpoint_state(), "prefetched": self.generation.checkpoint_state()}  # fmt: skip

    def save_checkpoint(self, state: dict[str, Any] | None = None) -> Path:
        state = self._checkpoint_state() if state is None else state
        return self.checkpoints.save(
            self.step,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=state["optimizer"],
            model_state=state["model_state"],
            algorithm=self.algorithm.state_dict(),
            weight_version=self.generation.policy.weight_version,
            counters={"tokens_generated_total": self.tokens_generated_total},
            prefetched=state["prefetched"],
        )

    def _resume(self) -> int:
        """Every part back to the latest checkpoint; its step."""
        restored = self.checkpoints.load_latest(self.model, load=self.learner.load_weights)
        self.learner.load_state_dict(restored.optimizer)
        self.algorithm.load_state_dict(restored.algorithm)
        self.step = restored.step
        self.tokens_generated_total = int(restored.counters.get("tokens_generated_total", 0))
        torch.set_rng_state(restored.torch_rng)
        self.generation.restore(restored, self.learner.engine_weights)
        return self.step

    # -- the end ----------------------------------------------------------------------------------

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.shutdown()
        if exc_type is None:  # a failed rank leaves the group to its launcher (World.close)
            self.world.close()

    def shutdown(self) -> None:
        """Stop generation and shut the engines down (a vLLM engine frees its memory; one in a
        process of its own ends). ``with Trainer(...) as trainer:`` does it however the block
        ends."""
        self.generation.shutdown()

    def close(self) -> None:
        """Stop generating ahead (a batch in progress is finished first); close episodes.jsonl."""
        self.generation.close()

    # -- the generating side's parts, as scripts and tests reach for them -----------------------

    policy = property(lambda self: self.generation.policy, doc="The engines, seen as one policy.")
    collector = property(lambda self: self.generation.collector, doc="A step's groups.")
    rollouts = property(lambda self: self.generation.rollouts, doc="Group rollouts.")
    verifier = property(lambda self: self.generation.verifier, doc="The envs' grader, if given.")
    prefetch = property(lambda self: self.generation.prefetch, doc="Generation ahead, if running.")

    @property
    def _ahead(self) -> dict[int, Any]:
        """Batches generated ahead that the next steps train on first (asynchronous)."""
        return self.generation.ahead

    @_ahead.setter
    def _ahead(self, batches: dict[int, Any]) -> None:
        self.generation.ahead = batches

    @property
    def measure_drift(self) -> bool:
        return self.config.measures_drift
