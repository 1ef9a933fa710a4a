"""What generates: a :class:`Policy` (token ids in, token ids out) behind a registered backend.

``registry.py`` holds :data:`BACKENDS` and :func:`build_policy`; each backend's module is
imported only when its factory runs: ``hf_policy.py`` (transformers, with its fused decode step
``fused_decode.py`` and preallocated cache ``kv_cache.py``), ``vllm_policy.py`` (an in-process
vLLM engine; ``vllm_compat.py`` is every touch of vLLM's API, ``weight_buckets.py`` the weight
push) and ``openai_policy.py`` (a running completions server).
"""

from typing import TYPE_CHECKING

from forkgym.surface import surface

if TYPE_CHECKING:
    from .policy import Generation, GenerationRequest, Policy, SamplingParams
    from .registry import BACKENDS, build_policy, missing_requirement

__all__ = [
    "BACKENDS",
    "Generation",
    "GenerationRequest",
    "Policy",
    "SamplingParams",
    "build_policy",
    "missing_requirement",
]
__getattr__, __dir__ = surface(
    __name__,
    {
        "BACKENDS": ".registry",
        "Generation": ".policy",
        "GenerationRequest": ".policy",
        "Policy": ".policy",
        "SamplingParams": ".policy",
        "build_policy": ".registry",
        "missing_requirement": ".registry",
    },
)
