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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .drift import CORRECTIONS, is_band

__all__ = ["ConfigError", "TrainConfig", "load_plugins", "option_problems"]


# set as config keys of their own, never through loss_kwargs
_LOSS_FIELDS = frozenset({"reduction", "kl_coef", "kl_estimator", "max_episode_tokens"})


class ConfigError(ValueError):
    """A configuration file or override is wrong; the message says which key and why."""


@dataclass
class TrainConfig:
    """Everything a training run depends on (the seed included)."""

    plugins: list[str] = field(default_factory=list)  # modules or .py files that register parts
    model: str = "runs/tiny-model"  # a directory from `forkgym model init`/`sft`, or a hub name
    env: str = "forkgym/Arithmetic-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    algorithm: str = "critic_free"  # critic_free (an estimator) | ppo (a learned critic)
    algorithm_kwargs: dict[str, Any] = field(default_factory=dict)  # ppo: gamma, lam, ...
    estimator: str = "rloo"  # critic_free's estimator (agents/estimators.py); ppo has none
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    backend: str = "transformers"  # what generates (agents/backends.py)
    backend_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. share_model: false
    loss: str = "ppo_clip"
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    reduction: str | None = None  # None: the loss's own default (named in the metrics)
    steps: int = 100
    time_budget_s: float | None = None  # stop (evaluated and checkpointed) after this long
    # a budget of generated tokens (every token generated: greedy branches, discarded groups,
    # a critic's warm-up): the run stops after the step that reaches it
    max_tokens_generated: int | None = None
    seed: int = 0
    prompts_per_step: int = 8
    k: int = 8  # sampled branches per task
    temperature: float = 1.0
    top_p: float = 1.0
    # top_p < 1 samples from a truncated, renormalised distribution that the loss does not
    # model: refused unless the user accepts that bias (docs/training.md)
    allow_truncated_sampling: bool = False
    max_new_tokens: int = 32  # per assistant turn
    lr: float = 1e-4  # the peak rate; the tiny default model; hub models want ~1e-6
    lr_schedule: str = "constant"  # constant | linear | cosine (agents/schedules.py)
    warmup_steps: int = 0  # linear ramp up to lr over the first steps
    lr_decay_steps: int | None = None  # the decay ends here (None: at `steps`)
    lr_final_ratio: float = 0.0  # the decay ends at lr * this
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    minibatches: int = 1
    micro_batch_size: int = 64
    # score each distinct prompt once per micro-batch and share its KV cache with the rows
    # (agents/prefix_sharing.py); equal to the full forward up to float rounding
    prefix_sharing: bool = True
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False  # subtract the KL penalty from the reward instead of the loss
    dynamic_sampling: bool = False  # DAPO: keep only groups with signal
    max_resample_rounds: int = 3
    overlong_buffer: int = 0  # DAPO's soft overlong punishment over this many tokens (0: off)
    overlong_max_tokens: int | None = None  # ... ending at this length (None: the budget)
    mask_truncated: bool = False  # DAPO's overlong filtering: truncated responses out of the loss
    diagnose_losses: bool = False  # stratify per-response losses too (diag/loss/by_*)
    length_edges: list[int] | None = (
        None  # response-length strata of diag/*/by_length (None: 128, 256, ...)
    )
    # train/serve drift (agents/drift.py): None measures it when the backend generates with
    # weights of its own (not the trainer's module); corrections: tis, seq_mask, geo_mask
    measure_drift: bool | None = None
    rollout_correction: list[str] = field(default_factory=list)
    tis_clamp: float = 2.0
    seq_mask_band: tuple[float, float] = (0.5, 2.0)
    geo_mask_band: tuple[float, float] = (0.99, 1.01)
    # generation on several engines and asynchronously (agents/engine_pool.py, prefetch.py):
    # N engines with weights of their own; max_staleness m >= 1 generates step t+1.. while
    # step t trains, no sample more than m weight versions old (0: synchronous)
    generation_engines: int = 1
    # under torchrun: whole copies of the model on every rank, gradients all-reduced
    # (replicate), or FSDP2 shards of it (shard; agents/sharding.py)
    data_parallel: str = "replicate"
    max_staleness: int = 0
    log_episodes: bool | None = None  # RUN_DIR/episodes.jsonl (None: in asynchronous runs)
    eval_every: int = 25
    eval_every_tokens: int | None = None  # also evaluate at each multiple of this many tokens
    eval_at_start: bool = True  # evaluate the starting policy (step 0) too
    eval_episodes: int = 128
    eval_k: int = 4  # sampled pass@k on the held-out tasks (0: greedy pass@1 only)
    eval_seed: int = 10_000  # held-out task seeds are drawn from a separate stream
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    out: str = "runs/train"
    store_url: str | None = None  # SQLite/SQL URL for runs and metrics (None: RUN_DIR/metrics.db)
    # grade through the HTTP service instead of in-process; several URLs: replicas, taken in
    # turn, each failing over to the next
    verifier_url: str | list[str] | None = None
    device: str = "cpu"
    threads: int | None = None  # torch intra-op threads (None: leave as is)
    tensorboard: bool = False
    # also log to Weights & Biases (pip install 'forkgym[wandb]'); WANDB_MODE=offline and the
    # other WANDB_* variables apply. Project None: $WANDB_PROJECT, else "forkgym"; run name
    # None: the run directory's name
    wandb: bool = False
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        problems = load_plugins(self.plugins)
        for name, ok, why in (
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
            ("generation_engines", self.generation_engines >= 1, "must be >= 1"),
            (
                "data_parallel",
                self.data_parallel in ("replicate", "shard"),
                "must be replicate (whole copies) or shard (FSDP2)",
            ),
            (
                "data_parallel",
                self.data_parallel != "shard" or (self.algorithm != "ppo" and self.kl_coef == 0),
                "shard does not shard a second model yet: a critic (algorithm ppo) or a KL "
                "reference (kl_coef > 0) needs data_parallel replicate",
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
            ("eval_k", self.eval_k >= 0, "must be >= 0 (0: greedy pass@1 only)"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: only at the end)"),
        ):
            if not ok:
                problems.append(f"{name}={getattr(self, name)!r} {why}")
        problems += self._named_parts()
        if problems:
            raise ConfigError("invalid training config: " + "; ".join(problems))
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.seq_mask_band = tuple(self.seq_mask_band)  # type: ignore[assignment]
        self.geo_mask_band = tuple(self.geo_mask_band)  # type: ignore[assignment]

    def _named_parts(self) -> list[str]:
        """Registered names and their keyword options, checked by building each part once."""
        from .algorithms import ALGORITHMS
        from .backends import BACKENDS, missing_requirement
        from .estimators import ESTIMATORS
        from .losses import KL_ESTIMATORS, LOSSES
        from .reductions import REDUCTIONS
        from .schedules import LR_SCHEDULES

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
        if self.loss in LOSSES:
            reserved = sorted(set(self.loss_kwargs) & _LOSS_FIELDS) if isinstance(self.loss_kwargs, dict) else []  # fmt: skip
            if reserved:
                problems.append(
                    f"loss_kwargs {reserved}: set them as config keys of their own "
                    "(reduction, kl_coef, kl_estimator; the token budget comes from max_new_tokens)"
                )
            else:
                problems += option_problems("loss_kwargs", LOSSES[self.loss], self.loss_kwargs)
        if self.backend in BACKENDS and (missing := missing_requirement(self.backend)):
            problems.append(missing)
        if self.backend in BACKENDS and not getattr(BACKENDS[self.backend], "trainable", True):
            problems.append(
                f"backend={self.backend!r} serves a frozen policy (evaluation and rollouts): "
                "it cannot take the trainer's weights"
            )
        options = self.backend_kwargs if isinstance(self.backend_kwargs, dict) else {}
        own_weights = self.backend not in ("transformers", "hf") or not options.get("share_model", True)  # fmt: skip
        if (self.generation_engines > 1 or self.max_staleness > 0 or self.data_parallel == "shard") and not own_weights:  # fmt: skip
            problems.append(
                "generation_engines > 1, max_staleness > 0 and data_parallel shard need engines "
                "with weights of their own, not the trainer's module: set "
                "backend_kwargs.share_model=false"
            )
        if self.backend in BACKENDS:
            fixed = {"model": None, "tokenizer": None, "device": None, "seed": None}
            problems += _accepts("backend_kwargs", BACKENDS[self.backend], self.backend_kwargs, **fixed)  # fmt: skip
        if self.algorithm in ALGORITHMS:
            algorithm = ALGORITHMS[self.algorithm]
            accepted = _accepts("algorithm_kwargs", algorithm, self.algorithm_kwargs, config=None, model=None)  # fmt: skip
            problems += accepted
            check = getattr(algorithm, "check", None)
            if check is not None and not accepted:  # the algorithm's own rules for its options
                problems += check(self, **self.algorithm_kwargs)
            per_token = getattr(algorithm, "token_advantages", False)
            if per_token and self.loss in LOSSES and not LOSSES[self.loss].token_advantages:
                problems.append(
                    f"loss {self.loss!r} needs one advantage per response; algorithm "
                    f"{self.algorithm!r} gives one per token (use ppo_clip, sapo or vanilla_pg)"
                )
        return problems

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


def _accepts(key: str, factory: Any, options: dict[str, Any], **fixed: Any) -> list[str]:
    """``[]`` if ``factory``'s signature takes these keyword options beside the ``fixed``
    arguments the trainer passes (a part built with the model checks their values then, or
    earlier in its ``check``)."""
    import inspect

    if not isinstance(options, dict):
        return [f"{key} must be a mapping, got {options!r}"]
    try:
        inspect.signature(factory).bind(**fixed, **options)
    except TypeError as exc:
        return [f"{key}={options!r}: {exc}"]
    return []


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
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
