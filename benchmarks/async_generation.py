"""Seconds per training step: synchronous generation against two engines and against
asynchronous generation (``max_staleness=1``), in one run.

The default tiny model (fresh weights: every response runs to the token budget, so each
configuration generates the same number of tokens) on ``forkgym/Arithmetic-v0``, K=8 branches
for 16 prompts per step, RLOO, PPO-clip. Every configuration generates with its own copy of
the weights (``share_model: false``), the shape of a separate engine; the baseline is the
synchronous loop on one engine. Two warm-up steps, then the median wall time between the
ends of consecutive steps (generation, update and weight sync; no evaluation).

Run: ``python benchmarks/async_generation.py [--steps N] [--max-new-tokens T] [--threads N]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time

from forkgym.agents.models import init_model
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.trainer import Trainer
from forkgym.verifiers import MathVerifier

CONFIGS = {
    "sync, 1 engine (baseline)": {},
    "sync, 2 engines": {"generation_engines": 2},
    "async max_staleness=1, 1 engine": {"max_staleness": 1},
    "async max_staleness=1, 2 engines": {"max_staleness": 1, "generation_engines": 2},
}


def seconds_per_step(
    model: str, out: str, steps: int, max_new_tokens: int, threads: int | None, **options
) -> float:
    config = TrainConfig(
        model=model,
        env="forkgym/Arithmetic-v0",
        env_kwargs={"system_prompt": None, "operations": "+"},
        estimator="rloo",
        k=8,
        prompts_per_step=16,
        max_new_tokens=max_new_tokens,
        steps=steps + 2,
        eval_every=0,
        checkpoint_every=0,
        backend_kwargs={"share_model": False},
        out=out,
        progress=False,
        threads=threads,
        **options,
    )
    ends: list[float] = []
    Trainer(config, verifier=MathVerifier(workers=0)).run(
        on_step=lambda step, metrics: ends.append(time.perf_counter())
    )
    return statistics.median(b - a for a, b in itertools.pairwise(ends[1:]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = str(init_model(f"{tmp}/model", corpus_seeds=8))
        results = {
            name: seconds_per_step(
                model, f"{tmp}/{i}", args.steps, args.max_new_tokens, args.threads, **opts
            )
            for i, (name, opts) in enumerate(CONFIGS.items())
        }
    base = next(iter(results.values()))
    threads = args.threads or "torch's default"
    print(f"seconds per step, K=8 x 16 prompts, {args.max_new_tokens} new tokens, median of {args.steps}, threads={threads}")  # fmt: skip
    for name, seconds in results.items():
        print(f"  {name:36s} {seconds:7.3f} s   {base / seconds:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
