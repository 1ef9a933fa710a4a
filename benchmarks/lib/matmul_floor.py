"""The matrix products of a GRPO step at its shapes, and how long they alone take here.

A step of a transformer policy spends its arithmetic in the linear layers: every token the
model reads passes through each layer's projections (``[tokens, in] @ [in, out]``), and the
LM head scores the tokens that are scored. :func:`step_gemms` lists those products for one
step of forkgym's trainer with its prefix sharing (generation: one prefill of each distinct
prompt, then one forward of the whole batch per further new token; the learner: the distinct
prompts once and every row's completion, forward, then the gradients of each product's input
and weight), and :func:`gemm_seconds` times each distinct shape with ``torch.mm`` on this
machine, with the threads torch has. Their sum is a floor the step cannot go under in that
precision without doing less arithmetic: attention, norms, activations, sampling and the
optimizer come on top. Attention's own products (a few per cent of the FLOPs at these
lengths) are left out, so the floor errs low.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["StepShape", "gemm_seconds", "linear_layers", "matmul_floor", "step_gemms"]

Gemm = tuple[int, int, int]  # (m, k, n): [m, k] @ [k, n]


@dataclass(frozen=True)
class StepShape:
    """One step's work: ``prompts`` distinct prompts of ``prompt_tokens``, ``k`` rows each,
    every row ``completion_tokens`` long (the stop token included; where lengths differ, a
    mean stands in for them, and the decode loop's shrinking batch is not modelled)."""

    prompts: int
    k: int
    prompt_tokens: int
    completion_tokens: int


def linear_layers(model: Any) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """``(in, out)`` of every linear layer of the trunk a token passes through, and of the LM
    head (a transformers causal LM: its base model and its output embeddings)."""
    trunk = [
        (m.in_features, m.out_features)
        for m in model.get_decoder().modules()
        if isinstance(m, torch.nn.Linear)
    ]
    head = model.get_output_embeddings()
    return trunk, (head.in_features, head.out_features)


def _forward(
    counts: Counter[Gemm], layers: list[tuple[int, int]], rows: int, times: int = 1
) -> None:
    for d_in, d_out in layers:
        counts[(rows, d_in, d_out)] += times


def step_gemms(model: Any, shape: StepShape) -> dict[str, Counter[Gemm]]:
    """The products of one step, per stage (``generation``, ``learner``), as counts of
    ``(m, k, n)`` shapes."""
    trunk, head = linear_layers(model)
    rows = shape.prompts * shape.k
    fed = shape.completion_tokens - 1  # the last token is scored, never read
    prompt_rows = shape.prompts * shape.prompt_tokens
    generation: Counter[Gemm] = Counter()
    _forward(generation, trunk, prompt_rows)  # each distinct prompt's prefill
    _forward(generation, [head], shape.prompts)  # scores the first new token
    _forward(generation, [*trunk, head], rows, times=fed)  # one forward per further token
    forward: Counter[Gemm] = Counter()
    _forward(forward, trunk, prompt_rows)
    _forward(forward, trunk, rows * fed)
    _forward(forward, [head], shape.prompts + rows * fed)  # each scored token once
    learner = Counter(forward)
    for (m, k, n), count in forward.items():
        learner[(m, n, k)] += count  # the input's gradient: [m, n] @ [n, k]
        learner[(n, m, k)] += count  # the weight's gradient: [n, m] @ [m, k]
    return {"generation": generation, "learner": learner}


def gemm_seconds(counts: Counter[Gemm], rounds: int = 5, reps: int = 10) -> float:
    """Seconds ``torch.mm`` takes for all of ``counts`` on this machine in fp32 (each shape
    timed alone: the median of ``rounds`` means of ``reps`` products, after a warm-up)."""
    total = 0.0
    for (m, k, n), count in counts.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        out = torch.empty(m, n)
        torch.mm(a, b, out=out)
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=out)
            samples.append((time.perf_counter() - start) / reps)
        total += count * statistics.median(samples)
    return total


def matmul_floor(model: Any, shape: StepShape) -> dict[str, float]:
    """Seconds of each stage's matrix products (``generation``, ``learner``) and their GFLOPs
    (``*_gflop``), timed here."""
    out: dict[str, float] = {}
    for stage, counts in step_gemms(model, shape).items():
        out[stage] = gemm_seconds(counts)
        out[f"{stage}_gflop"] = sum(2 * m * k * n * c for (m, k, n), c in counts.items()) / 1e9
    return out
