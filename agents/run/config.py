"""The training configuration: one typed dataclass, loadable from YAML or TOML, overridable.

``TrainConfig.load(path, overrides)`` reads a file (``.yaml``/``.yml``/``.toml``), applies
``key=value`` overrides (values parsed as YAML scalars; ``env_kwargs.digits=3`` reaches into a
dict field) and validates everything at once, naming every unknown key. The resolved config
is saved with each run (``config.yaml``), so a run directory says exactly what produced it.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ..advantages.base import ALGORITHMS
from ..advantages.estimators import ESTIMATORS
from ..generation.backends.registry import BACKENDS
from ..learner.drift import CORRECTIONS, is_band
from ..learner.losses import KL_ESTIMATORS, LOSSES
from ..learner.reductions import REDUCTIONS
from ..learner.schedules import LR_SCHEDULES

__all__ = [
    "SECTIONS",
    "ConfigError",
    "TrainConfig",
    "field_help",
    "load_plugins",
    "option_problems",
]


class ConfigError(ValueError):
    """A configuration file or override is wrong; the message says which key and why."""


# the parts of a run the fields configure, in the order the docs list them
SECTIONS: dict[str, str] = {
    "run": "The run",
    "generation": "Generation",
    "algorithm": "The algorithm",
    "learner": "The learner",
    "distribution": "Distribution",
    "evaluation": "Evaluation and checkpoints",
    "logging": "Logging",
}


def _section(section: str) -> Callable[..., dict[str, Any]]:
    """The field metadata of one section: ``help`` (what the field does, written once) and
    ``shown``, how the docs state a default that its value alone does not say (``None``
    meaning "the loss's own")."""

    def metadata(help: str, *, shown: str | None = None) -> dict[str, Any]:
        return {"help": help, "section": section, "shown": shown}

    return metadata


_run, _gen, _alg, _learn, _dist, _eval, _log = (_section(s) for s in SECTIONS)


@dataclass
class TrainConfig:
    """Everything a training run depends on (the seed included).

    Each field is documented once, in its ``help`` metadata, under the part of the run it
    configures (``section``); the configuration table of ``docs/training.md`` is generated
    from them (:mod:`forkgym.agents.run.config_docs`). Keys stay flat: ``key=value`` overrides
    name them directly.
    """

    # -- the run ---------------------------------------------------------------------------
    plugins: list[str] = field(
        default_factory=list,
        metadata=_run(
            "modules or `.py` files imported first: what they register can be named below"
        ),
    )
    model: str = field(
        default="runs/tiny-model",
        metadata=_run("a directory from `forkgym model init` or `forkgym sft`, or a hub name"),
    )
    env: str = field(default="forkgym/Arithmetic-v0", metadata=_run("the environment"))
    env_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata=_run("its constructor arguments (a reward map as `rewards: {invalid: -0.5}`)"),
    )
    seed: int = field(
        default=0, metadata=_run("every random choice of the run is keyed by it (agents/seeds.py)")
    )
    steps: int = field(default=100, metadata=_run("training steps"))
    time_budget_s: float | None = field(
        default=None,
        metadata=_run(
            "stop (evaluated and checkpointed) after the step that passes this many seconds"
        ),
    )
    max_tokens_generated: int | None = field(
        default=None,
        metadata=_run(
            "stop after the step that reaches this many generated tokens (every token: greedy "
            "branches, discarded groups, a critic's warm-up; checkpointed)"
        ),
    )
    out: str = field(default="runs/train", metadata=_run("the run directory"))

    # -- generation --------------------------------------------------------------------------
    backend: str = field(
        default="transformers",
        metadata=_gen(
            "what generates: `transformers` (alias `hf`) or `vllm` ([GPU](vllm-gpu.md), "
            "[CPU](vllm-cpu.md))"
        ),
    )
    backend_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata=_gen(
            "the backend's options; transformers: `share_model: false` generates with a separate "
            "copy, `share_prefill: false` prefills every request's prompt on its own, "
            "`noise_device: model` draws the sampling uniforms (one per row and token) on the "
            "model's device, from the device's own random stream, "
            "`decode: model` runs every decode step through the model's `forward` instead of "
            "the fused step Llama- and Qwen2-shaped models get (the same tokens up to float "
            "rounding)"
        ),
    )
    prompts_per_step: int = field(default=8, metadata=_gen("tasks per step"))
    k: int = field(default=8, metadata=_gen("sampled branches per task"))
    temperature: float = field(default=1.0, metadata=_gen("sampling temperature"))
    top_p: float = field(
        default=1.0, metadata=_gen("nucleus sampling; < 1 needs `allow_truncated_sampling`")
    )
    allow_truncated_sampling: bool = field(
        default=False,
        metadata=_gen(
            "accept `top_p` < 1, whose samples come from a renormalised nucleus the loss does not "
            "model (every importance ratio is biased)"
        ),
    )
    max_new_tokens: int = field(default=32, metadata=_gen("the token budget of one assistant turn"))
    dynamic_sampling: bool = field(
        default=False,
        metadata=_gen("DAPO's dynamic sampling: keep only groups with signal (needs `k` >= 2)"),
    )
    max_resample_rounds: int = field(
        default=3, metadata=_gen("dynamic sampling's extra rounds of fresh tasks")
    )
    generation_engines: int = field(
        default=1,
        metadata=_gen("generate on this many engines at once, each with weights of its own"),
    )
    max_staleness: int = field(
        default=0,
        metadata=_gen(
            "asynchronous generation: train on samples at most this many weight versions old "
            "(0: synchronous)"
        ),
    )
    verifier_url: str | list[str] | None = field(
        default=None,
        metadata=_gen(
            "grade through the [verifier service](service.md) instead of in-process; a list of "
            "URLs: replicas, taken in turn, each failing over to the next"
        ),
    )

    # -- the algorithm -----------------------------------------------------------------------
    algorithm: str = field(
        default="critic_free",
        metadata=_alg(
            "`critic_free` (an estimator), `ppo` (a learned critic), `vine` (Monte Carlo "
            "values from forks), `gigpo` (the estimator plus turn-level groups of exact env "
            "states) or `raft` (rejection sampling)"
        ),
    )
    algorithm_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata=_alg(
            "the algorithm's options (ppo: `gamma`, `lam`, ...; gigpo: `omega`, `gamma`, `step_std`)"
        ),
    )
    estimator: str = field(
        default="rloo",
        metadata=_alg("the critic-free estimator (agents/advantages/estimators.py); ppo has none"),
    )
    estimator_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata=_alg("the estimator's options (`grpo`: `eps`)")
    )
    overlong_buffer: int = field(
        default=0,
        metadata=_alg(
            "DAPO's soft overlong punishment over this many last tokens of the budget (0: off)"
        ),
    )
    overlong_max_tokens: int | None = field(
        default=None, metadata=_alg("where that punishment ends", shown="the episode's budget")
    )
    kl_in_reward: bool = field(
        default=False,
        metadata=_alg(
            "subtract the KL penalty from the reward (before the estimator), not the loss"
        ),
    )

    # -- the learner -------------------------------------------------------------------------
    loss: str = field(
        default="ppo_clip",
        metadata=_learn(
            "the token loss: a registered name (docs/training.md, Losses and reductions)"
        ),
    )
    loss_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata=_learn("the loss's options (`eps_low`, `eps_high`, `dual_clip`, ...)"),
    )
    reduction: str | None = field(
        default=None,
        metadata=_learn(
            "`seq_sum`, `seq_mean_token_mean`, `token_mean` or `dr_grpo_constant` (named in the "
            "metrics)",
            shown="the loss's own",
        ),
    )
    lr: float = field(
        default=1e-4,
        metadata=_learn("the peak learning rate (the tiny default model; hub models want ~1e-6)"),
    )
    lr_schedule: str = field(
        default="constant", metadata=_learn("`constant`, `linear` or `cosine`")
    )
    warmup_steps: int = field(
        default=0, metadata=_learn("linear ramp up to `lr` over the first steps")
    )
    lr_decay_steps: int | None = field(
        default=None, metadata=_learn("where the decay ends", shown="`steps`")
    )
    lr_final_ratio: float = field(default=0.0, metadata=_learn("the decay ends at `lr` times this"))
    weight_decay: float = field(default=0.0, metadata=_learn("AdamW's weight decay"))
    betas: tuple[float, float] = field(default=(0.9, 0.99), metadata=_learn("AdamW's betas"))
    grad_clip: float = field(default=1.0, metadata=_learn("the gradient norm is clipped to this"))
    ppo_epochs: int = field(default=1, metadata=_learn("passes over a step's rows"))
    minibatches: int = field(default=1, metadata=_learn("optimizer steps per pass"))
    micro_batch_size: int = field(default=64, metadata=_learn("rows per forward"))
    prefix_sharing: bool = field(
        default=True,
        metadata=_learn(
            "run each distinct prompt once per micro-batch and share its KV cache with the rows "
            "(off: every row's full sequence; a sharded model always does that)"
        ),
    )
    kl_coef: float = field(
        default=0.0, metadata=_learn("KL to the starting weights (0: no reference model is kept)")
    )
    kl_estimator: str = field(default="k3", metadata=_learn("`k1`, `k2` or `k3`"))
    mask_truncated: bool = field(
        default=False,
        metadata=_learn(
            "DAPO's overlong filtering: truncated responses out of the loss, still counted"
        ),
    )
    measure_drift: bool | None = field(
        default=None,
        metadata=_learn(
            "log the engine's log-probs against the trainer's (`drift/...`)",
            shown="on for engines with weights of their own",
        ),
    )
    rollout_correction: list[str] = field(
        default_factory=list,
        metadata=_learn(
            "train/serve corrections: any of `tis`, `seq_mask`, `geo_mask`",
            shown="`[tis]` when `max_staleness` > 0, else `[]`",
        ),
    )
    tis_clamp: float = field(
        default=2.0, metadata=_learn("`tis`: the importance weight's upper clamp")
    )
    seq_mask_band: tuple[float, float] = field(
        default=(0.5, 2.0), metadata=_learn("`seq_mask`: the band a sequence's ratio must stay in")
    )
    geo_mask_band: tuple[float, float] = field(
        default=(0.99, 1.01),
        metadata=_learn("`geo_mask`: the band a sequence's geometric-mean ratio must stay in"),
    )

    # -- distribution ------------------------------------------------------------------------
    data_parallel: str = field(
        default="replicate",
        metadata=_dist(
            "under `torchrun`: whole copies of the model per rank (`replicate`), or FSDP2 shards "
            "(`shard`)"
        ),
    )
    device: str = field(default="cpu", metadata=_dist("the torch device"))
    threads: int | None = field(
        default=None, metadata=_dist("torch intra-op threads", shown="unchanged")
    )

    # -- evaluation and checkpoints ----------------------------------------------------------
    eval_every: int = field(
        default=25, metadata=_eval("held-out evaluation every this many steps (0: never)")
    )
    eval_every_tokens: int | None = field(
        default=None,
        metadata=_eval(
            "also evaluate at the first step past each multiple of this many generated tokens"
        ),
    )
    eval_at_start: bool = field(
        default=True, metadata=_eval("evaluate the starting policy (step 0) too")
    )
    held_out: bool = field(
        default=True,
        metadata=_eval(
            "train on the train side of the env's content partition and evaluate on its eval "
            "side (`task_split`), so no evaluated problem is ever a training prompt; false: "
            "both draw from every task"
        ),
    )
    eval_episodes: int = field(default=128, metadata=_eval("held-out tasks per evaluation"))
    eval_tasks: list[int] | None = field(
        default=None,
        metadata=_eval(
            "the held-out tasks' reset seeds, one fixed list (`eval_episodes` of them; null: "
            "`eval_episodes` draws of the eval stream keyed by `eval_seed`)"
        ),
    )
    eval_k: int = field(
        default=4, metadata=_eval("sampled pass@k on the held-out tasks (0: greedy pass@1 only)")
    )
    eval_seed: int = field(
        default=10_000,
        metadata=_eval("held-out task seeds come from a stream no training step draws"),
    )
    checkpoint_every: int = field(
        default=50, metadata=_eval("a checkpoint every this many steps (0: only at the end)")
    )
    keep_checkpoints: int = field(default=2, metadata=_eval("the newest checkpoints kept"))

    # -- logging -----------------------------------------------------------------------------
    store_url: str | None = field(
        default=None,
        metadata=_log(
            "an SQLite or SQLAlchemy URL for runs and metrics", shown="`RUN_DIR/metrics.db`"
        ),
    )
    tensorboard: bool = field(
        default=False, metadata=_log("also log to TensorBoard (`RUN_DIR/tensorboard`)")
    )
    wandb: bool = field(
        default=False,
        metadata=_log(
            "also log to Weights & Biases (`pip install 'forkgym[wandb]'`; `WANDB_MODE=offline` "
            "and the other `WANDB_*` variables apply)"
        ),
    )
    wandb_project: str | None = field(
        default=None, metadata=_log("the W&B project", shown="`$WANDB_PROJECT` or `forkgym`")
    )
    wandb_run_name: str | None = field(
        default=None, metadata=_log("the W&B run name", shown="the run folder's name")
    )
    log_episodes: bool | None = field(
        default=None,
        metadata=_log(
            "one line per episode in `RUN_DIR/episodes.jsonl`: weight version, staleness, outcome",
            shown="on in asynchronous runs",
        ),
    )
    diagnose_losses: bool = field(
        default=False,
        metadata=_log("also stratify per-response losses by group size, length and reward std"),
    )
    length_edges: list[int] | None = field(
        default=None,
        metadata=_log(
            "the response-length strata of `diag/*/by_length`", shown="128, 256, ... 4096"
        ),
    )
    progress: bool = field(default=True, metadata=_log("the command line's progress bar"))

    def __post_init__(self) -> None:
        problems = load_plugins(self.plugins)
        for name, ok, why in (*self._sampling_rules(), *self._learning_rules(), *self._run_rules()):
            if not ok:
                problems.append(f"{name}={getattr(self, name)!r} {why}")
        problems += self._named_parts()
        if problems:
            raise ConfigError("invalid training config: " + "; ".join(problems))
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.seq_mask_band = tuple(self.seq_mask_band)  # type: ignore[assignment]
        self.geo_mask_band = tuple(self.geo_mask_band)  # type: ignore[assignment]

    def _sampling_rules(self) -> list[tuple[str, bool, str]]:
        """(field, holds, why not) of the steps, the groups, the sampler and its drift's
        corrections."""
        return [
            ("steps", self.steps >= 1, "must be >= 1"),
            ("prompts_per_step", self.prompts_per_step >= 1, "must be >= 1"),
            ("k", self.k >= 1, "must be >= 1"),
            ("temperature", self.temperature > 0, "must be > 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            (
                "top_p",
                self.top_p == 1 or self.allow_truncated_sampling,
                "< 1 samples from the renormalised nucleus, while the loss's ratios use the "
                "full-vocabulary log-probs (and an engine's returned log-probs are renormalised "
                "over the nucleus): every importance ratio of such a sample is biased. Set "
                "allow_truncated_sampling=true to train with it anyway",
            ),
            (
                "rollout_correction",
                isinstance(self.rollout_correction, list)
                and set(self.rollout_correction) <= set(CORRECTIONS),
                "must be a list of tis, seq_mask, geo_mask",
            ),
            (
                "rollout_correction",
                not self.rollout_correction or self.measure_drift is not False,
                "needs the drift measurement (measure_drift must not be false)",
            ),
            ("tis_clamp", self.tis_clamp >= 1, "must be >= 1"),
            (
                "seq_mask_band",
                is_band(self.seq_mask_band),
                "must be [low, high] with low <= 1 <= high",
            ),
            (
                "geo_mask_band",
                is_band(self.geo_mask_band),
                "must be [low, high] with low <= 1 <= high",
            ),
        ]

    def _learning_rules(self) -> list[tuple[str, bool, str]]:
        """(field, holds, why not) of the token budget, the optimizer, the loss and the reward's
        shaping."""
        return [
            ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
            ("lr", self.lr > 0, "must be > 0"),
            ("warmup_steps", self.warmup_steps >= 0, "must be >= 0"),
            (
                "lr_decay_steps",
                self.lr_decay_steps is None or self.lr_decay_steps > self.warmup_steps,
                "must be > warmup_steps",
            ),
            ("lr_final_ratio", 0 <= self.lr_final_ratio <= 1, "must be in [0, 1]"),
            ("ppo_epochs", self.ppo_epochs >= 1, "must be >= 1"),
            ("minibatches", self.minibatches >= 1, "must be >= 1"),
            ("micro_batch_size", self.micro_batch_size >= 1, "must be >= 1"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("grad_clip", self.grad_clip > 0, "must be > 0"),
            ("kl_coef", self.kl_coef >= 0, "must be >= 0"),
            ("kl_in_reward", not self.kl_in_reward or self.kl_coef > 0, "needs kl_coef > 0"),
            ("max_resample_rounds", self.max_resample_rounds >= 0, "must be >= 0"),
            (
                "dynamic_sampling",
                not self.dynamic_sampling or self.k >= 2,
                "needs k >= 2 (a group of one has no signal to keep)",
            ),
            ("overlong_buffer", self.overlong_buffer >= 0, "must be >= 0 (0: off)"),
            (
                "overlong_max_tokens",
                self.overlong_max_tokens is None
                or (self.overlong_buffer > 0 and self.overlong_max_tokens >= self.overlong_buffer),
                "needs overlong_buffer > 0 and must be >= overlong_buffer (or null: the budget)",
            ),
            (
                "length_edges",
                self.length_edges is None
                or (
                    len(self.length_edges) > 0
                    and all(
                        int(a) < int(b)
                        for a, b in zip(self.length_edges[:-1], self.length_edges[1:], strict=True)
                    )
                ),
                "must be a non-empty increasing list of token counts (or null)",
            ),
        ]

    def _run_rules(self) -> list[tuple[str, bool, str]]:
        """(field, holds, why not) of the engines, the ranks, staleness, evaluation and
        checkpoints."""
        return [
            ("generation_engines", self.generation_engines >= 1, "must be >= 1"),
            (
                "data_parallel",
                self.data_parallel in ("replicate", "shard"),
                "must be replicate (whole copies) or shard (FSDP2)",
            ),
            (
                "data_parallel",
                self.data_parallel != "shard" or self.kl_coef == 0,
                "shard does not shard a second model yet: a KL reference (kl_coef > 0) needs "
                "data_parallel replicate",
            ),
            ("max_staleness", self.max_staleness >= 0, "must be >= 0 (0: synchronous)"),
            (
                "max_staleness",
                not self.max_staleness or self.measure_drift is not False,
                "> 0 corrects stale samples with the drift measurement's importance weights "
                "(measure_drift must not be false)",
            ),
            ("eval_every", self.eval_every >= 0, "must be >= 0 (0: never)"),
            (
                "eval_every_tokens",
                self.eval_every_tokens is None or self.eval_every_tokens >= 1,
                "must be >= 1 (or null: by steps only)",
            ),
            (
                "max_tokens_generated",
                self.max_tokens_generated is None or self.max_tokens_generated >= 1,
                "must be >= 1 (or null: no token budget)",
            ),
            ("eval_episodes", self.eval_episodes >= 1, "must be >= 1"),
            (
                "eval_tasks",
                self.eval_tasks is None or len(self.eval_tasks) == self.eval_episodes,
                "must hold eval_episodes task seeds (or be null)",
            ),
            (
                "env_kwargs",
                not (self.held_out and "task_split" in self.env_kwargs),
                "sets task_split, which held_out=true sets itself (train side for training, "
                "eval side for evaluation); leave it out or set held_out=false",
            ),
            ("eval_k", self.eval_k >= 0, "must be >= 0 (0: greedy pass@1 only)"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: only at the end)"),
        ]

    def _named_parts(self) -> list[str]:
        """Registered names, then each named part's own check of this configuration (its
        options, and what it needs of the rest of the run)."""
        problems: list[str] = []
        for key, registry in (
            ("algorithm", ALGORITHMS),
            ("estimator", ESTIMATORS),
            ("loss", LOSSES),
            ("backend", BACKENDS),
            ("lr_schedule", LR_SCHEDULES),
        ):
            name = getattr(self, key)
            if name not in registry:
                problems.append(f"{key}={name!r} is not one of {sorted(registry)}")
        if self.reduction is not None and self.reduction not in REDUCTIONS:
            problems.append(f"reduction={self.reduction!r} is not one of {REDUCTIONS} (or null)")
        if self.kl_estimator not in KL_ESTIMATORS:
            problems.append(f"kl_estimator={self.kl_estimator!r} is not one of {KL_ESTIMATORS}")
        for registry, name in ((LOSSES, self.loss), (BACKENDS, self.backend), (ALGORITHMS, self.algorithm)):  # fmt: skip
            if name in registry:
                problems += registry[name].check(self)
        return problems

    # -- what the parts read ---------------------------------------------------------------

    @property
    def engines_have_own_weights(self) -> bool:
        """Whether the generation engines hold weights of their own rather than the trainer's
        module (as the backend declares: ``shares_model(options)``)."""
        return not BACKENDS.lookup(self.backend).shares_model(dict(self.backend_kwargs))

    @property
    def drift_corrections(self) -> list[str]:
        """The train/serve corrections applied: ``rollout_correction``, or truncated importance
        sampling when stale samples need one (``max_staleness`` > 0)."""
        return list(self.rollout_correction) or (["tis"] if self.max_staleness else [])

    @property
    def measures_drift(self) -> bool:
        """``measure_drift``, or by default: when the engines generate with weights of their
        own, or a correction needs the measurement."""
        if self.measure_drift is not None:
            return self.measure_drift
        return self.engines_have_own_weights or bool(self.drift_corrections)

    def check_ranks(self, ranks: int) -> None:
        """Refuse what data parallelism over ``ranks`` ranks would change rather than split."""
        if ranks == 1:
            return
        problems = []
        if self.prompts_per_step < ranks:
            problems.append(
                f"prompts_per_step ({self.prompts_per_step}) must be at least the number of "
                f"ranks ({ranks}): each rank trains on whole groups"
            )
        if ESTIMATORS.lookup(self.estimator).batch_wide:
            problems.append(
                f"estimator {self.estimator!r} takes its baseline over the whole batch; under "
                "data parallelism each rank would see only its share: use a group estimator"
            )
        if self.dynamic_sampling:
            problems.append(
                "dynamic_sampling with data parallelism could leave a rank without groups; "
                "turn it off, or train on one rank"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    # -- files and overrides ---------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(_unknown_keys(unknown, known))
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(str(exc)) from None

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: list[str] | None = None, **values: Any
    ) -> TrainConfig:
        """File, then keyword values, then ``key=value`` overrides (later wins)."""
        data: dict[str, Any] = read_file(path) if path is not None else {}
        data.update({k: v for k, v in values.items() if v is not None})
        for override in overrides or []:
            apply_override(data, override)
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["betas"] = list(self.betas)
        return data

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=True))


def field_help(key: str) -> str:
    """The one description of the config key ``key`` (its field's ``help``), for a command
    line that offers the key as an option of its own."""
    for f in fields(TrainConfig):
        if f.name == key:
            return f.metadata["help"]
    raise KeyError(f"no config key {key!r}")


def _unknown_keys(unknown: list[str], known: set[str]) -> str:
    """``unknown config key 'temprature' (did you mean 'temperature'?)``: the closest known
    keys by difflib's ratio, else where the keys are listed."""
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(known), n=2, cutoff=0.6)
        hint = " or ".join(repr(c) for c in close)
        named.append(f"{key!r} (did you mean {hint}?)" if close else repr(key))
    where = "" if all("did you mean" in n for n in named) else "; the keys: docs/training.md#configuration"  # fmt: skip
    plural = "s" if len(unknown) > 1 else ""
    return f"unknown config key{plural} {', '.join(named)}{where}"


def load_plugins(plugins: list[str]) -> list[str]:
    """Import each plugin (a module name, or the path of a ``.py`` file) so that what it
    registers (estimators, algorithms, losses, backends, environments) can be named in the
    config; the problems, if any."""
    import importlib

    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        return [f"plugins={plugins!r} must be a list of module names or .py paths"]
    problems = []
    for plugin in plugins:
        try:
            if plugin.endswith(".py"):
                _load_file(Path(plugin))
            else:
                importlib.import_module(plugin)
        except Exception as exc:  # a plugin's own error, reported as a config problem
            problems.append(f"plugins: {plugin!r} failed to load: {type(exc).__name__}: {exc}")
    return problems


def _load_file(path: Path) -> None:
    """Run a plugin file once per process (keyed by its resolved path, relative paths from the
    working directory); a file that fails is not remembered."""
    import hashlib
    import importlib.util

    if not path.is_file():
        raise ImportError(f"no such file: {path}")
    resolved = path.resolve()
    name = f"forkgym_plugin_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def option_problems(key: str, factory: Any, options: dict[str, Any]) -> list[str]:
    """``[]`` if ``factory(**options)`` accepts the options, else the reason it does not."""
    if not isinstance(options, dict):
        return [f"{key} must be a mapping, got {options!r}"]
    try:
        factory(**options)
    except (TypeError, ValueError) as exc:
        return [f"{key}={options!r}: {exc}"]
    return []


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {path} {where}: give a .yaml, .yml or .toml file")
    text = path.read_text()
    if path.suffix in {".yaml", ".yml"}:
        data = yaml.safe_load(text) or {}
    elif path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        data = tomllib.loads(text)
    else:
        raise ConfigError(f"{path}: config files are .yaml, .yml or .toml")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def apply_override(data: dict[str, Any], override: str) -> None:
    """``key=value`` or ``dict_field.key=value``; the value is parsed as a YAML scalar."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {override!r} is not key=value")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: {exc}") from None
    if isinstance(value, str):  # YAML 1.1 reads 3e-4 as a string; a number is meant
        for kind in (int, float):
            try:
                value = kind(raw)
                break
            except ValueError:
                continue
    head, dot, rest = key.partition(".")
    if dot:
        target = data.setdefault(head, {})
        if not isinstance(target, dict):
            raise ConfigError(f"override {override!r}: {head!r} is not a mapping")
        target[rest] = value
    else:
        data[key] = value
