"""The transformers backend's decode loop: its KV cache, its fused step and torch.compile, side by side in one run.

The generation of ``forkgym bench --preset quick``'s first step
(:func:`lib.recipes.quick_generation_requests`: 8 prompts x K = 8 seeded samples, at most
``--new-tokens`` new tokens), on forkgym's default untrained models, by
:class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy` four ways, round after round in turn:

* ``dynamic``: every step through the model's ``forward`` (``decode="model"``) on
  transformers' ``DynamicCache``, which copies every layer's keys and values into a new tensor
  at each token (``kv_cache="dynamic"``);
* ``preallocated``: the model's ``forward`` on a cache allocated once per batch
  (:mod:`forkgym.agents.generation.backends.kv_cache`); its tokens and log-probs must equal ``dynamic``'s exactly,
  which the script checks;
* ``fused``: the default, :class:`~forkgym.agents.generation.backends.fused_decode.FusedDecoder`'s step (the same
  layer in fewer operations); it rounds differently, so its tokens are compared (share equal)
  and its log-probs (largest difference where the tokens are equal);
* ``compiled``: ``preallocated`` with the model's ``forward`` under ``torch.compile``
  (inductor, ``dynamic=True``: the batch shrinks as rows finish and the cache grows), on a copy
  of the model; the first generation, which compiles, is timed apart. Compiled kernels round
  differently, so its log-probs are compared (largest difference) rather than required equal.
  ``--no-compile`` leaves it out.

Printed: generated tokens per second, best and median of ``--rounds`` rounds, per model size.
Run: ``python benchmarks/decode_loop.py [--sizes tiny,base] [--rounds 7] [--no-compile]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from lib.recipes import quick_generation_requests

from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.models import init_model, load_policy_model


def compiled_policy(model: Any, tokenizer: Any) -> HFPolicy:
    twin = copy.deepcopy(model)
    twin.forward = torch.compile(twin.forward, dynamic=True)
    return HFPolicy(twin, tokenizer, decode="model")


def measure(size: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer = load_policy_model(path)
    requests = quick_generation_requests(tokenizer, args.new_tokens)
    policies = {
        "dynamic": HFPolicy(model, tokenizer, kv_cache="dynamic", decode="model"),
        "preallocated": HFPolicy(model, tokenizer, decode="model"),
        "fused": HFPolicy(model, tokenizer),
    }
    first: dict[str, float] = {}
    if args.compile:
        policies["compiled"] = compiled_policy(model, tokenizer)
    outputs = {}
    for name, policy in policies.items():
        start = time.perf_counter()
        outputs[name] = policy.generate(requests)  # warm-up (the compilation, for `compiled`)
        first[name] = time.perf_counter() - start
    same = [
        (a.token_ids, a.logprobs, a.finish_reason) == (b.token_ids, b.logprobs, b.finish_reason)
        for a, b in zip(outputs["dynamic"], outputs["preallocated"], strict=True)
    ]
    if not all(same):
        raise RuntimeError(f"preallocated differs from dynamic in {same.count(False)} rows")
    rates: dict[str, list[float]] = {name: [] for name in policies}
    for _ in range(args.rounds):
        for name, policy in policies.items():
            start = time.perf_counter()
            out = policy.generate(requests)
            seconds = time.perf_counter() - start
            rates[name].append(sum(len(g.token_ids) for g in out) / seconds)
    result: dict[str, Any] = {
        "params": sum(p.numel() for p in model.parameters()),
        "tokens": sum(len(g.token_ids) for g in outputs["preallocated"]),
        "rates": rates,
        "first": first,
    }
    for name in ("fused", "compiled") if args.compile else ("fused",):
        result[name] = agreement(outputs["preallocated"], outputs[name])
    return result


def agreement(reference: list[Any], other: list[Any]) -> tuple[float, float]:
    """Share of rows with the same tokens, and the largest log-prob difference among them."""
    pairs = list(zip(reference, other, strict=True))
    equal = [a.token_ids == b.token_ids for a, b in pairs]
    diffs = [
        abs(x - y)
        for a, b in pairs
        if a.token_ids == b.token_ids
        for x, y in zip(a.logprobs, b.logprobs, strict=True)
    ]
    return sum(equal) / len(equal), max(diffs, default=float("nan"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,base", help="tiny, small, base")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=23)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    args = parser.parse_args()
    print(
        f"decode_loop  torch {torch.__version__}, {torch.get_num_threads()} threads; quick preset "
        f"shape: 8 prompts x K=8, at most {args.new_tokens} new tokens, fp32; tokens/s, best "
        f"(median) of {args.rounds} rounds, the variants in turn"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            r = measure(size, init_model(Path(tmp) / size, size=size, corpus_seeds=8), args)
            print(f"\n{size}: {r['params'] / 1e6:.1f}M parameters, {r['tokens']:,} tokens per generation")  # fmt: skip
            base = max(r["rates"]["dynamic"])
            for name, rates in r["rates"].items():
                note = ""
                if name == "preallocated":
                    note = "  same tokens and log-probs as dynamic: yes"
                if name in ("fused", "compiled"):
                    same, diff = r[name]
                    note = f"  same tokens {same:.0%}, log-probs within {diff:.1e}"
                if name == "compiled":
                    note += f"; first generation (compiling) {r['first'][name]:.1f} s"
                rate = f"{max(rates):,.0f} ({statistics.median(rates):,.0f})"
                print(f"  {name:13} {rate:>18} tok/s  {max(rates) / base:.2f}x{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
