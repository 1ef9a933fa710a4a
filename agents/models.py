"""The offline default model and one loading path for local directories and hub models.

:func:`init_model` builds a small Llama-style causal LM from a config (nothing downloaded):
the tokenizer is trained on the environments' text (:mod:`forkgym.agents.tokenizer`), the
weights are initialised under a fixed torch seed, and both are saved with ``save_pretrained``
(weights as safetensors), so :func:`load_policy_model` (``AutoModelForCausalLM`` /
``AutoTokenizer.from_pretrained``) serves this directory and a hub model such as
``Qwen/Qwen2.5-0.5B-Instruct`` in exactly the same way.

Sizes (:data:`MODEL_SIZES`), with the default 1,024-token vocabulary and tied embeddings:

=======  ======  =====  ======  ========  ===  ==========  ==========
size     hidden  layers heads   kv heads  mlp  head dim    parameters
=======  ======  =====  ======  ========  ===  ==========  ==========
tiny     128     4      4       2         448  32          1,016,960
small    256     6      8       4         704  32          4,689,152
base     512     8      16      8         1408 32          24,125,952
=======  ======  =====  ======  ========  ===  ==========  ==========

The head size is 32 because vLLM's CPU attention backend accepts 32, 64, 80, 96, 112, 128, …
(not 48), so the same directory can be served by vLLM. RoPE (θ = 10,000), SwiGLU, RMSNorm,
no biases, 2,048 positions. Same arguments give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .tokenizer import IM_END, build_tokenizer, corpus_from_envs

__all__ = [
    "MODEL_SIZES",
    "chat_stop_token_ids",
    "init_model",
    "load_policy_model",
    "load_tokenizer",
    "missing_local_model",
    "model_config",
    "parameter_count",
]

MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 448,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
    "base": {
        "hidden_size": 512,
        "intermediate_size": 1408,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
    },
}
HEAD_DIM = 32
MAX_POSITIONS = 2048
DEFAULT_CORPUS_SEEDS = 32

# Qwen2.5-0.5B's published configuration (its config.json): the benchmarks build a model of
# this shape with random weights, without the hub
QWEN_05B_CONFIG: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151_936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32_768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
}


def model_config(
    size: str = "tiny", vocab_size: int = 1024, eos_token_ids: list[int] | None = None
) -> Any:
    """The ``LlamaConfig`` of a named size (pad = id 0, no BOS token)."""
    from transformers import LlamaConfig

    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; choose from {sorted(MODEL_SIZES)}")
    dims = MODEL_SIZES[size]
    assert dims["hidden_size"] == dims["num_attention_heads"] * HEAD_DIM
    return LlamaConfig(
        vocab_size=vocab_size,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_token_ids if eos_token_ids is not None else 0,
        pad_token_id=0,
        **dims,
    )


def parameter_count(size: str, vocab_size: int = 1024) -> int:
    """Parameters of a named size (tied embeddings counted once), computed on the meta device."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(model_config(size, vocab_size))
    return sum(p.numel() for p in model.parameters())


def init_model(
    out_dir: str | Path,
    size: str = "tiny",
    seed: int = 0,
    vocab_size: int = 1024,
    corpus_seeds: int = DEFAULT_CORPUS_SEEDS,
) -> Path:
    """Build the tokenizer and a freshly initialised model; save both to ``out_dir``.

    The tokenizer is trained on :func:`corpus_from_envs` (``corpus_seeds`` episodes per env);
    the model's vocabulary is the tokenizer's. Weights are drawn under ``torch.manual_seed(seed)``
    inside a forked RNG (the caller's global RNG is untouched). The generation config stops at
    ``<|im_end|>`` and ``<|endoftext|>``. Returns the directory.
    """
    from transformers import LlamaForCausalLM

    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; choose from {sorted(MODEL_SIZES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus_from_envs(corpus_seeds), vocab_size=vocab_size)
    tokenizer.model_max_length = MAX_POSITIONS
    eos = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id]
    config = model_config(size, vocab_size=len(tokenizer), eos_token_ids=eos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    with _quiet_progress():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    provenance = {
        "size": size,
        "seed": seed,
        "vocab_size": len(tokenizer),
        "corpus_seeds": corpus_seeds,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    (out / "forkgym_model.json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return out


def missing_local_model(name_or_dir: str | Path) -> str | None:
    """Why ``name_or_dir`` cannot be loaded as a local model, or None. A name that exists is a
    folder that must hold a model; a name that does not exist but is written as a path
    (absolute, ``./``, ``../``, ``~``, or more than one ``/``: a hub id is ``org/name``) is a
    missing folder, and is never looked up on the model hub."""
    text = str(name_or_dir)
    path = Path(text).expanduser()
    if path.is_file():
        return f"{text} is a file: a model is the folder that holds its config.json and weights ({path.parent}?)"  # fmt: skip
    if path.exists():
        if path.is_dir() and not (path / "config.json").exists():
            return f"{text} holds no model (no config.json); build one with `forkgym model init --out {text}`"  # fmt: skip
        return None
    if text.startswith(("/", "./", "../", "~")) or "\\" in text or text.count("/") > 1:
        return f"no model at {text}: the folder does not exist (a local path is never looked up on the model hub); build one with `forkgym model init --out {text}`"  # fmt: skip
    return None


def load_tokenizer(name_or_dir: str | Path, **from_pretrained: Any) -> Any:
    """The tokenizer of a local directory or a hub name, with its own chat template; a missing
    pad token is set to the eos token (or to ``<|im_end|>``/``<|endoftext|>`` when there is
    none)."""
    from transformers import AutoTokenizer

    if problem := missing_local_model(name_or_dir):
        raise FileNotFoundError(problem)
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_dir), **from_pretrained)
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token
        if fallback is None:
            vocab = tokenizer.get_vocab()
            fallback = next((t for t in (IM_END, "<|endoftext|>") if t in vocab), None)
        if fallback is None:
            raise ValueError(f"{name_or_dir}: the tokenizer has no pad or eos token to pad with")
        tokenizer.pad_token = fallback
    return tokenizer


def load_policy_model(
    name_or_dir: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **from_pretrained: Any,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local directory or a hub name, by one code path
    (:func:`load_tokenizer` for the tokenizer). Extra keyword arguments go to both
    ``from_pretrained`` calls (``revision=``, ``local_files_only=``, ...). The model is
    returned in eval mode.
    """
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(name_or_dir, **from_pretrained)
    with _quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(
            str(name_or_dir), dtype=dtype, **from_pretrained
        )
    model.to(device)
    model.eval()
    return model, tokenizer


@contextmanager
def _quiet_progress() -> Iterator[None]:
    """No transformers progress bars for a few-megabyte save or load (restored after)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def chat_stop_token_ids(tokenizer: Any, model: Any | None = None) -> tuple[int, ...]:
    """Token ids that end an assistant turn: the generation config's eos ids, the tokenizer's
    eos and ``<|im_end|>`` when the vocabulary has it (sorted, unique)."""
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is not None:
        ids.update([eos] if isinstance(eos, int) else eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    im_end = tokenizer.get_vocab().get(IM_END)
    if im_end is not None:
        ids.add(im_end)
    return tuple(sorted(ids))
