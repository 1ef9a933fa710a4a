"""One owner of generation: the engines, each step's batch, the weights pushed to them.

The trainer holds one :class:`Generation` and never asks how it generates. It builds the
policy (one engine of the configured backend, or an :class:`~.engine_pool.EnginePool`), the
environments and their verifier, and the :class:`~.collect.Collector`; it hands out each
step's :class:`~.batch.RolloutBatch` with its ledger, pushes the learner's weights to the
engines, evaluates on them, writes ``episodes.jsonl``, and keeps (and restores) what a
checkpoint needs of it. Two kinds behind that one interface, chosen by
``TrainConfig.max_staleness``:

* :class:`SynchronousGeneration` (``max_staleness: 0``): a step's batch is generated when the
  step asks for it, with the weights of the step before;
* :class:`AsynchronousGeneration` (``max_staleness: m >= 1``): a producer thread generates
  the next steps' batches while the learner updates (:mod:`.prefetch`, a fixed schedule), and
  before a batch is handed out the groups generated more than ``m`` weight versions before
  the learner's are dropped (never by the schedule; the bound holds whatever happened). The
  checkpoint keeps the batches generated ahead with older weights, so a resumed run trains on
  exactly what the uninterrupted one did.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.envs.base import on_side

from ..batch import RolloutBatch
from ..distributed import World
from ..run.checkpoint import Restored
from ..run.config import TrainConfig
from ..seeds import engine_seed
from ..timing import Stages
from .backends.policy import Policy
from .backends.registry import BACKENDS, build_policy
from .collect import Collector
from .engine_pool import EnginePool
from .episode_log import EpisodeLog, episode_records, write_outcomes
from .evaluate import evaluate
from .fork_values import ForkValues
from .ledger import GenerationLedger
from .prefetch import Prefetcher
from .rollout import Rollouts

__all__ = [
    "AsynchronousGeneration",
    "Generation",
    "SynchronousGeneration",
    "build_engines",
    "build_generation",
]

Collected = tuple[RolloutBatch, GenerationLedger]
Weights = Callable[[], torch.nn.Module | dict[str, Any]]


def build_engines(config: TrainConfig, model: torch.nn.Module, tokenizer: Any) -> Policy:
    """The configured backend for ``model`` (before it is sharded: an engine copies whole
    weights), or a pool of ``generation_engines`` of them. One engine takes the run seed;
    a pool takes it in that engine's place (it seeds every request before handing it on, as
    one engine would) and its engines get keyed seeds (agents/seeds.py)."""
    backend = BACKENDS.lookup(config.backend)
    options = {key: getattr(config, key) for key in backend.config_options}
    options.update(config.backend_kwargs)

    def engine(seed: int) -> Policy:
        return build_policy(
            config.backend, model, tokenizer, device=config.device, seed=seed, **options
        )

    if config.generation_engines == 1:
        return engine(config.seed)
    count = config.generation_engines
    return EnginePool.build(lambda i: engine(engine_seed(config.seed, i)), count, seed=config.seed)


class Generation:
    """The generating side of a run (see the module docstring); subclasses decide when a
    step's batch is generated."""

    log_episodes_by_default = False  # RUN_DIR/episodes.jsonl when log_episodes is None

    def __init__(
        self,
        config: TrainConfig,
        policy: Policy,
        tokenizer: Any,
        *,
        world: World,
        greedy: bool,
        values: ForkValues | None = None,
        states: bool = False,
        verifier: Any | None = None,
        run_id: str = "",
    ) -> None:
        """``greedy``: collect one greedy branch per task, ``values``: value the states of
        the sampled episodes by Monte Carlo continuations, ``states``: record the env's state
        key at each turn's start (the algorithm declares all three);
        ``verifier``: grade with this object instead of the env's default or
        ``config.verifier_url``'s service."""
        self.config, self.policy, self.tokenizer, self.world = config, policy, tokenizer, world
        self.verifier = verifier
        if verifier is None and config.verifier_url:
            from forkgym.services import VerifierClient

            self.verifier = VerifierClient(config.verifier_url, run_id=run_id)
        self.rollouts = Rollouts(
            self.make_env,
            policy,
            tokenizer,
            k=config.k,
            greedy=greedy,
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed,
            record_states=states,
        )
        self.collector = Collector(
            self.rollouts,
            seed=config.seed,
            prompts_per_step=config.prompts_per_step,
            dynamic_sampling=config.dynamic_sampling,
            max_resample_rounds=config.max_resample_rounds,
            world=world,
            values=values,
        )
        self.episode_log: EpisodeLog | None = None
        # RUN_DIR/eval/: each evaluation's per-task outcomes (rank 0; see open_episode_log)
        self.outcomes_dir: Path | None = None
        # batches generated ahead with older weights, handed out first (asynchronous; a
        # checkpoint keeps them)
        self.ahead: dict[int, Collected] = {}

    @property
    def max_episode_tokens(self) -> int:
        """An episode's generation budget: ``max_new_tokens`` per turn, times the turns."""
        return self.config.max_new_tokens * self.rollouts.max_turns

    @property
    def prefetch(self) -> Prefetcher | None:
        """The producer of batches generated ahead (asynchronous generation, while it runs)."""
        return None

    def make_env(self, side: str = "train") -> Any:
        """The run's env drawing ``side``'s problems (every problem without ``held_out``)."""
        kwargs = on_side(self.config.env_kwargs, side if self.config.held_out else None)
        if self.verifier is not None:
            kwargs["verifier"] = self.verifier
        return gym.make(self.config.env, **kwargs)

    def make_eval_env(self) -> Any:
        return self.make_env("eval")

    def open_episode_log(self, run_dir: Path, resume_step: int | None) -> None:
        """Write ``episodes.jsonl`` from now on, if the run does (rank 0 alone)."""
        wanted = self.config.log_episodes
        if wanted is None:
            wanted = self.log_episodes_by_default
        if wanted and self.world.main:
            self.episode_log = EpisodeLog(run_dir, resume_step=resume_step)
        if self.world.main:
            self.outcomes_dir = run_dir / "eval"

    # -- a step ---------------------------------------------------------------------------------

    def batch(self, step: int) -> tuple[RolloutBatch, GenerationLedger, dict[str, Any]]:
        """Step ``step``'s batch, the ledger of what generating it cost, and metrics of how it
        was generated."""
        raise NotImplementedError

    def push(self, step: int, weights: Weights | None) -> dict[str, Any]:
        """Step ``step`` is trained: push ``weights()`` to the engines (None: the policy did
        not move); the push's costs as ``sync/...``."""
        raise NotImplementedError

    def _push(self, weights: Weights | None) -> dict[str, Any]:
        if weights is None:
            return {}
        return {f"sync/{k}": v for k, v in (self.policy.sync_weights(weights()) or {}).items()}

    def offload(self) -> None:
        """A colocated engine frees its memory for the update."""
        self.policy.offload()

    def _log_episodes(self, batch: RolloutBatch, step: int, kept: torch.Tensor | None) -> None:
        if self.episode_log is not None:
            groups = None if kept is None else set(kept.nonzero().flatten().tolist())
            records = episode_records(batch, step + 1, self.policy.weight_version, groups)
            self.episode_log.log(records)

    # -- evaluation ------------------------------------------------------------------------------

    def engine(self) -> contextlib.AbstractContextManager[Any]:
        """The engines to oneself (asynchronous generation shares them with its producer)."""
        return contextlib.nullcontext()

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics, with the seconds they took as ``time/eval``."""
        config, stages = self.config, Stages()
        outcomes: list[dict[str, Any]] = []
        with stages("eval"), self.engine():
            out = evaluate(
                self.policy,
                self.tokenizer,
                self.make_eval_env,
                episodes=config.eval_episodes,
                seed=config.eval_seed,
                k=config.eval_k,
                max_new_tokens=config.max_new_tokens,
                temperature=config.temperature,
                tasks=config.eval_tasks,
                record=outcomes,
            )
        if self.outcomes_dir is not None:  # one file per evaluation, by the weights' version
            version = self.policy.weight_version
            write_outcomes(self.outcomes_dir / f"version_{version:07d}.json", outcomes, version)
        return {**out, **stages.metrics()}

    # -- checkpoints and the end -----------------------------------------------------------------

    def checkpoint_state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of generation (every rank calls it)."""
        return None

    def restore(self, restored: Restored, weights: Weights) -> None:
        """A resumed run: the engines take the checkpoint's weights and version."""
        self.policy.sync_weights(weights(), version=restored.weight_version)

    def close(self) -> None:
        """Stop generating (a batch in progress is finished first) and close the episode log."""
        if self.episode_log is not None:
            self.episode_log.close()
            self.episode_log = None

    def shutdown(self) -> None:
        """Stop, then shut the engines down (a vLLM engine frees its memory; one in a process
        of its own ends)."""
        self.close()
        self.policy.close()


class SynchronousGeneration(Generation):
    """A step's batch is generated when the step asks for it."""

    def batch(self, step: int) -> tuple[RolloutBatch, GenerationLedger, dict[str, Any]]:
        batch, ledger = self.collector.collect(step)
        self._log_episodes(batch, step, None)
        return batch, ledger, {}

    def push(self, step: int, weights: Weights | None) -> dict[str, Any]:
        return self._push(weights)


class AsynchronousGeneration(Generation):
    """The next steps' batches are generated while the learner updates, at most
    ``max_staleness`` weight versions older than the learner's (agents/generation/prefetch.py)."""

    log_episodes_by_default = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefetch: Prefetcher | None = None  # started by the first step

    @property
    def prefetch(self) -> Prefetcher | None:
        return self._prefetch

    def batch(self, step: int) -> tuple[RolloutBatch, GenerationLedger, dict[str, Any]]:
        bound = self.config.max_staleness
        if self._prefetch is None:
            self._prefetch = Prefetcher(
                self.collector.collect,
                max_staleness=bound,
                first_step=step,
                end_step=self.config.steps,
                ready=self.ahead,
            )
            self.ahead = {}
        batch, ledger, waited = self._prefetch.get(step)
        version = self.policy.weight_version  # the learner's weights (no push runs meanwhile)
        staleness = (version - batch.weight_version).to(torch.float64)
        keep = staleness <= bound
        self._log_episodes(batch, step, keep)
        metrics = {
            "async/wait_s": waited,
            "async/staleness_mean": float(staleness.mean()) if batch.prompts else 0.0,
            "async/staleness_max": int(staleness.max()) if batch.prompts else 0,
            "async/dropped_stale_groups": int((~keep).sum()),
        }
        if not keep.all():  # never by the schedule; the bound is kept whatever happened
            batch = batch.select(keep)
        return batch, ledger, metrics

    def push(self, step: int, weights: Weights | None) -> dict[str, Any]:
        """Once the batches that must see the old weights are generated; the seconds waited
        for them as ``async/push_wait_s``."""
        assert self._prefetch is not None, "push before the step's batch"
        out, waited = self._prefetch.finished(step, lambda: self._push(weights))
        return {**out, "async/push_wait_s": waited}

    def engine(self) -> contextlib.AbstractContextManager[Any]:
        return self._prefetch.engine if self._prefetch is not None else contextlib.nullcontext()

    def checkpoint_state(self) -> dict[str, Any] | None:
        """The batches generated ahead with older weights than the checkpoint's, every rank's
        share (gathered on rank 0), so that a resumed run trains on exactly what this one will."""
        ahead = self._prefetch.pending() if self._prefetch is not None else self.ahead
        mine = {
            str(step): {"batch": batch.to_dict(), "ledger": asdict(ledger)}
            for step, (batch, ledger) in ahead.items()
        }
        return {
            "max_staleness": self.config.max_staleness,
            "world_size": self.world.size,
            "ranks": self.world.gather(mine),
        }

    def restore(self, restored: Restored, weights: Weights) -> None:
        """Also the batches generated ahead, unless they were generated under another
        ``max_staleness`` or for another number of ranks' shares (then they are generated
        again)."""
        super().restore(restored, weights)
        ahead = restored.prefetched
        if (
            ahead is not None
            and ahead.get("max_staleness") == self.config.max_staleness
            and ahead.get("world_size") == self.world.size
        ):
            self.ahead = {
                int(step): (RolloutBatch.from_dict(b["batch"]), GenerationLedger(**b["ledger"]))
                for step, b in ahead["ranks"][self.world.rank].items()
            }

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()
            self._prefetch = None
        super().close()


def build_generation(
    config: TrainConfig, policy: Policy, tokenizer: Any, **options: Any
) -> Generation:
    """Synchronous or asynchronous generation, as ``max_staleness`` says; ``options`` are
    :class:`Generation`'s."""
    kind = AsynchronousGeneration if config.max_staleness else SynchronousGeneration
    return kind(config, policy, tokenizer, **options)
