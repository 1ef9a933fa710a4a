"""Where a training step's time goes: generation, verification, estimator, loss, backward, sync.

The default tiny model on ``forkgym/Arithmetic-v0``, K=8 sampled branches for 16 prompts per
step (128 episodes), RLOO, PPO-clip loss, one optimizer step. Two warm-up steps, then the mean
of ``--steps`` timed steps. Verification is timed by wrapping the environment's verifier, so
"env" below is everything else an environment step costs.

Each step runs twice in one process, the baseline first: every row's prompt through the model
on its own (``prefix_sharing: false`` and the backend's ``share_prefill: false``), then each
distinct prompt once, its KV cache shared by the group's K rows (the default; generation's
prefill and the learner's forward, ``agents/learner/prefix_sharing.py``). Both start from the same
weights and draw the same tasks.

Run: ``python benchmarks/step_time.py [--model DIR] [--steps N] [--k K] [--prompts P]
[--max-new-tokens T]`` (without ``--model`` a fresh tiny model is built; an untrained model
writes until the token budget, so pass a warm-started one for realistic lengths, or set the
budget to the length being measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict

import torch
from lib.recipes import TimedVerifier

from forkgym.agents.models import init_model
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.trainer import Trainer
from forkgym.verifiers import MathVerifier


def measure(args: argparse.Namespace, model: str, out: str, share: bool) -> dict[str, list[float]]:
    """Per-step seconds of every part (and token counts) over ``args.steps`` timed steps."""
    config = TrainConfig(
        model=model,
        env="forkgym/Arithmetic-v0",
        env_kwargs={"system_prompt": None, "operations": "+"},
        estimator="rloo",
        k=args.k,
        prompts_per_step=args.prompts,
        max_new_tokens=args.max_new_tokens,
        steps=args.steps + 2,
        eval_every=0,
        checkpoint_every=0,
        out=out,
        progress=False,
        prefix_sharing=share,
        backend_kwargs={"share_prefill": share},
    )
    verifier = TimedVerifier(MathVerifier(workers=0))
    trainer = Trainer(config, verifier=verifier)
    rows: dict[str, list[float]] = defaultdict(list)
    for i in range(args.steps + 2):
        verifier.seconds = 0.0
        start = time.perf_counter()
        m = trainer.train_step()
        total = time.perf_counter() - start
        trainer.step += 1
        if i < 2:
            continue
        parts = {
            "generation": m["time/generate"],
            "verification": verifier.seconds,
            "env (reset, step, tools)": m["time/env_and_verify"] - verifier.seconds,
            "advantages": m["time/reward"] + m["time/adv"],
            "forward + loss": m.get("time/forward_and_loss", 0.0),
            "backward": m.get("time/backward", 0.0),
            "optimizer": m.get("time/optimizer", 0.0),
            "sync weights": m["time/sync"],
        }
        parts["other (batching, metrics)"] = total - sum(parts.values())
        for key, value in parts.items():
            rows[key].append(value)
        rows["total"].append(total)
        rows["tokens generated"].append(m["tokens_generated"])
        rows["tokens trained"].append(m["tokens_trained"])
    trainer.log.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--k", type=int, default=8, help="sampled branches per prompt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(init_model(f"{tmp}/model", corpus_seeds=8))
        alone = measure(args, model, f"{tmp}/alone", share=False)
        shared = measure(args, model, f"{tmp}/shared", share=True)
    print(
        f"step_time  tiny model ({'given' if args.model else 'untrained'}), K={args.k} x {args.prompts} prompts, max {args.max_new_tokens} new tokens, torch threads={torch.get_num_threads()}, mean of {args.steps} steps"
    )
    total = {
        name: statistics.mean(r["total"]) for name, r in (("alone", alone), ("shared", shared))
    }
    print(f"{'part':28} {'rows alone':>10} {'share':>6} {'prompts shared':>15} {'share':>6}")
    for key in alone:
        if key.startswith("tokens"):
            continue
        a, b = statistics.mean(alone[key]), statistics.mean(shared[key])
        print(
            f"{key:28} {a:>10.3f} {a / total['alone']:>6.0%} {b:>15.3f} {b / total['shared']:>6.0%}"
        )
    for name, rows in (("rows alone", alone), ("prompts shared", shared)):
        print(
            f"{name}: tokens generated per step {statistics.mean(rows['tokens generated']):,.0f}; trained {statistics.mean(rows['tokens trained']):,.0f}"
        )
    print(f"prompts shared / rows alone, time per step: {total['shared'] / total['alone']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
