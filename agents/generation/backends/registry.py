"""Generation backends by name: what serves the policy's samples during training.

The trainer builds its policy with :func:`build_policy` from ``TrainConfig.backend`` and never
imports a backend module: each entry of :data:`BACKENDS` is a factory that imports its own
module when called. After every optimizer step the trainer calls
``policy.sync_weights(model)`` with its training model; the backend decides what that costs
(nothing for a policy on the trainer's own module, a copy for a separate engine).

``transformers`` (alias ``hf``; :class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy`):
``share_model=True`` (the default) generates with the training module itself;
``share_model=False`` with a separate copy that ``sync_weights`` overwrites, the shape a
separate engine has. ``noise_device="model"`` draws the sampling uniforms on the model's device
(a GPU's own random stream) instead of the CPU. ``kv_cache="dynamic"`` decodes on
transformers' own growing KV cache instead of one allocated once per batch (the same
numbers; it exists to measure the difference). ``decode="model"`` runs every decode step
through the model's own ``forward`` instead of the fused step that Llama- and Qwen2-shaped
models get by default (:mod:`forkgym.agents.generation.backends.fused_decode`; the same tokens up to float
rounding, fewer operations per token).

``vllm`` (:class:`~forkgym.agents.generation.backends.vllm_policy.VLLMPolicy`): an in-process vLLM engine started
from the directory the model came from (``model_path`` to override); its options are the
policy's (``bucket_mb``, ``dtype``, ``sleep_level``, ``engine_kwargs``, ...).

``openai`` (:class:`~forkgym.agents.generation.backends.openai_policy.OpenAIPolicy`): a running completions server
(``base_url``); a frozen policy, for evaluation and rollouts, never for training
(``trainable = False``).

Each backend is a :class:`Backend` subclass: :meth:`Backend.build` makes its policy, and the
class says what the configuration and the generation side need to know, with the base's
defaults where a backend has nothing to say: ``trainable`` (False: refused for training),
``requires`` (the module it needs installed and how to install it), ``shares_model(options)``
(it generates with the trainer's own module; the default: engines with weights of their own),
``config_options`` (``TrainConfig`` keys it takes as options) and :meth:`Backend.check`, its
problems with a training configuration. Nothing asks a backend which one it is by its name.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from forkgym.registry import Registry

from .policy import Policy

if TYPE_CHECKING:
    from ...run.config import TrainConfig

__all__ = ["BACKENDS", "Backend", "build_policy", "missing_requirement"]


class Backend:
    """A registered way to generate: it builds the policy of a run and says what it can do."""

    name = "base"
    trainable: ClassVar[bool] = True  # False: a frozen policy (evaluation, rollouts)
    # (module, how to install it): checked with the configuration, before any model loads
    requires: ClassVar[tuple[str, str] | None] = None
    # TrainConfig keys the backend takes as options of the same name (one opt-in covers the
    # configuration's check and the engine's own)
    config_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def build(
        cls,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        device: str,
        seed: int,
        **options: Any,
    ) -> Policy:
        """The policy for the training ``model``; ``options`` are ``backend_kwargs``."""
        raise NotImplementedError

    @classmethod
    def shares_model(cls, options: dict[str, Any]) -> bool:
        """Whether, with these options, it generates with the trainer's own module (rather
        than engines with weights of their own)."""
        return False

    @classmethod
    def missing(cls) -> str | None:
        """Why it cannot start here (a module it needs is not installed), or None."""
        if cls.requires is None or importlib.util.find_spec(cls.requires[0]) is not None:
            return None
        return f"backend {cls.name!r} needs the {cls.requires[0]!r} package: {cls.requires[1]}"

    @classmethod
    def check(cls, config: TrainConfig) -> list[str]:
        """What is wrong with training under ``config`` on this backend (``[]``: nothing)."""
        problems = [m] if (m := cls.missing()) else []
        if not cls.trainable:
            problems.append(
                f"backend={config.backend!r} serves a frozen policy (evaluation and rollouts): "
                "it cannot take the trainer's weights"
            )
        own = config.generation_engines > 1 or config.max_staleness > 0 or config.data_parallel == "shard"  # fmt: skip
        if own and isinstance(config.backend_kwargs, dict) and cls.shares_model(config.backend_kwargs):  # fmt: skip
            problems.append(
                "generation_engines > 1, max_staleness > 0 and data_parallel shard need engines "
                "with weights of their own, not the trainer's module: set "
                "backend_kwargs.share_model=false"
            )
        return problems + cls.option_problems(config.backend_kwargs)

    @classmethod
    def option_problems(cls, options: Any) -> list[str]:
        """``[]`` if :meth:`build` takes these keyword options beside what the trainer passes."""
        if not isinstance(options, dict):
            return [f"backend_kwargs must be a mapping, got {options!r}"]
        fixed = {"model": None, "tokenizer": None, "device": None, "seed": None}
        try:
            inspect.signature(cls.build).bind(**fixed, **options)
        except TypeError as exc:
            return [f"backend_kwargs={options!r}: {exc}"]
        return []


BACKENDS: Registry[type[Backend]] = Registry("backend", name_attribute="name", base=Backend)


def build_policy(
    name: str,
    model: torch.nn.Module | None,
    tokenizer: Any,
    *,
    device: str = "cpu",
    seed: int = 0,
    **options: Any,
) -> Policy:
    """The policy of backend ``name`` for the training ``model``; ``options`` are the
    backend's own (``TrainConfig.backend_kwargs``)."""
    return BACKENDS.lookup(name).build(model, tokenizer, device=device, seed=seed, **options)


def missing_requirement(name: str) -> str | None:
    """Why backend ``name`` cannot start here (a module it needs is not installed), or None."""
    return BACKENDS.lookup(name).missing()


@BACKENDS.register("transformers")
class Transformers(Backend):
    """:class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy` (alias ``hf``)."""

    @classmethod
    def build(
        cls,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        device: str,
        seed: int,
        share_model: bool = True,
        max_batch: int = 128,
        share_prefill: bool = True,
        noise_device: str = "cpu",
        kv_cache: str = "preallocated",
        decode: str = "fused",
    ) -> Policy:
        from .hf_policy import HFPolicy

        if not share_model:
            # a plain copy: marking its parameters requires_grad=False would send linear layers
            # down other kernels (log-probs ~1e-6 off the shared model's)
            model = copy.deepcopy(model)
        return HFPolicy(
            model, tokenizer, device=device, seed=seed, max_batch=max_batch,
            share_prefill=share_prefill, noise_device=noise_device, kv_cache=kv_cache,
            decode=decode,
        )  # fmt: skip

    @classmethod
    def shares_model(cls, options: dict[str, Any]) -> bool:
        """The trainer's own module unless told otherwise (several engines, asynchronous
        generation and sharded training need weights of their own)."""
        return bool(options.get("share_model", True))


BACKENDS["hf"] = BACKENDS["transformers"]


@BACKENDS.register("vllm")
class VLLM(Backend):
    """:class:`~forkgym.agents.generation.backends.vllm_policy.VLLMPolicy`."""

    requires = (
        "vllm",
        "pip install 'forkgym[vllm]' on a GPU machine; on a CPU, python3 dev.py vllm-env "
        "(docs/vllm-cpu.md)",
    )
    config_options = ("allow_truncated_sampling",)

    @classmethod
    def build(
        cls,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        device: str,
        seed: int,
        model_path: str | None = None,
        bucket_mb: float = 64.0,
        dtype: str = "float32",
        max_model_len: int | None = 2048,
        kv_cache_gib: int = 1,
        gpu_memory_utilization: float = 0.4,
        sleep_level: int = 1,
        allow_truncated_sampling: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
        weight_push: bool = True,
    ) -> Policy:
        from .vllm_policy import VLLMPolicy

        options: dict[str, Any] = {
            "seed": seed,
            "bucket_mb": bucket_mb,
            "dtype": dtype,
            "max_model_len": max_model_len,
            "kv_cache_gib": kv_cache_gib,
            "gpu_memory_utilization": gpu_memory_utilization,
            "sleep_level": sleep_level,
            "allow_truncated_sampling": allow_truncated_sampling,
            "engine_kwargs": engine_kwargs,
            "weight_push": weight_push,
        }
        if model_path is not None:
            return VLLMPolicy(model_path, tokenizer, **options)
        return VLLMPolicy.from_module(model, tokenizer, **options)


@BACKENDS.register("openai")
class OpenAI(Backend):
    """:class:`~forkgym.agents.generation.backends.openai_policy.OpenAIPolicy`: a running
    completions server, a frozen policy."""

    trainable = False

    @classmethod
    def build(
        cls,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        device: str,
        seed: int,
        base_url: str = "http://127.0.0.1:8000/v1",
        served_model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        concurrency: int = 16,
    ) -> Policy:
        from .openai_policy import OpenAIPolicy

        return OpenAIPolicy(
            base_url,
            tokenizer,
            model=served_model,
            api_key=api_key,
            seed=seed,
            timeout_s=timeout_s,
            concurrency=concurrency,
        )
