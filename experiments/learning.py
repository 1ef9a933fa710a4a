"""Learning: RLOO, GRPO and ReMax from one warm start, three seeds each, on a 2-core CPU.

1. Build the default tiny model and warm-start it with SFT on arithmetic demonstrations, in
   chunks, until held-out greedy accuracy lies in 20-50% (the start every RL run shares).
2. Train each estimator for each seed for at most ``--minutes`` of wall-clock time, evaluating
   greedy accuracy on the same held-out tasks every ``--eval-every`` steps, and stop a run early
   once it is 30 points above the start (``--full`` keeps going to the time limit).
3. The same on the calculator tool env (multi-turn: tool call, tool result, answer) with
   RLOO: 2-digit sums and products, the boxed result as the final answer; the warm start stops
   at 25% (below it the tiny model has not yet learned to copy the tool's result at all). A
   gain of at least 10 points (two standard errors of a difference on 200 tasks) counts as
   clear.

Prints, per run, held-out accuracy at the start, at its best and at the end, the time and the
generated tokens it took to gain 30 points, and writes a plot of accuracy against generated
tokens. Every figure comes from this run; nothing is cached between invocations except the
built models under ``--work`` (delete it for a clean run).

Run: ``python experiments/learning.py [--minutes 10] [--seeds 0 1 2] [--out docs/learning.png]``
(``--skip-arithmetic`` / ``--skip-calculator`` run one part; ``--calculator-seeds`` picks its
seeds; ``--short-prompt`` drops the answer-format sentence from arithmetic prompts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import forkgym.envs  # noqa: F401
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.plots import curves, plot_runs
from forkgym.agents.run.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # lib.recipes
from lib.recipes import (
    ARITH_TOKENS,
    ARITHMETIC,
    ARITHMETIC_SHORT,
    CALC_TOKENS,
    CALCULATOR,
    EVAL_EPISODES,
    HELD_OUT_RUN,
    warm_start,
)

CLEAR_GAIN = 0.10  # two standard errors of a difference on 200 tasks
GAIN = 0.30


def train(
    model: Path,
    env_id: str,
    env_kwargs: dict,
    estimator: str,
    seed: int,
    out: Path,
    minutes: float,
    eval_every: int,
    max_new_tokens: int,
    start: float,
    full: bool,
) -> dict:
    config = TrainConfig(
        model=str(model),
        env=env_id,
        env_kwargs=env_kwargs,
        estimator=estimator,
        seed=seed,
        steps=100_000,
        time_budget_s=minutes * 60,
        prompts_per_step=8,
        k=8,
        max_new_tokens=max_new_tokens,
        lr=1e-4,
        eval_every=eval_every,
        out=str(out),
        **HELD_OUT_RUN,
    )
    began = time.perf_counter()
    reached: dict = {}
    tokens = 0

    def stop(step: int, metrics: dict) -> bool:
        nonlocal tokens
        tokens += metrics.get("tokens_generated") or 0
        accuracy = metrics.get("eval_accuracy")
        if accuracy is not None and accuracy >= start + GAIN and not reached:
            reached.update(step=step, seconds=time.perf_counter() - began, tokens=tokens)
        return bool(reached) and not full

    Trainer(config).run(stop=stop)
    data = curves(out)
    return {
        "start": data["eval_accuracy"][0],
        "best": max(data["eval_accuracy"]),
        "end": data["eval_accuracy"][-1],
        "seconds": time.perf_counter() - began,
        "reached": reached or None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock limit per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--estimators", nargs="+", default=["rloo", "grpo", "remax"])
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument(
        "--full", action="store_true", help="run to the time limit even after +30 points"
    )
    parser.add_argument("--work", type=Path, default=Path("runs/bench-learning"))
    parser.add_argument("--out", type=Path, default=Path("docs/learning.png"))
    parser.add_argument("--skip-calculator", action="store_true")
    parser.add_argument("--skip-arithmetic", action="store_true")
    parser.add_argument("--calculator-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--short-prompt", action="store_true")
    args = parser.parse_args()
    arithmetic = ARITHMETIC_SHORT if args.short_prompt else ARITHMETIC
    args.work.mkdir(parents=True, exist_ok=True)

    results: list[tuple[str, str, int, dict, Path]] = []
    sft_tokens = 0
    if not args.skip_arithmetic:
        print("warm start (SFT on gold demonstrations, until held-out greedy accuracy >= 20%)")
        warm, start, sft_tokens = warm_start(
            args.work, "forkgym/Arithmetic-v0", arithmetic, ARITH_TOKENS, 0.20, 2_000_000
        )
        for estimator in args.estimators:
            for seed in args.seeds:
                out = args.work / f"arith-{estimator}-seed{seed}"
                r = train(
                    warm,
                    "forkgym/Arithmetic-v0",
                    arithmetic,
                    estimator,
                    seed,
                    out,
                    args.minutes,
                    args.eval_every,
                    ARITH_TOKENS,
                    start,
                    args.full,
                )
                results.append(("arithmetic", estimator, seed, r, out))
                print(f"  arithmetic {estimator:6} seed {seed}: {json.dumps(r)}", flush=True)
    if not args.skip_calculator:
        calc, calc_start, calc_tokens = warm_start(
            args.work, "forkgym/Calculator-v0", CALCULATOR, CALC_TOKENS, 0.25, 2_000_000, 40
        )
        print(f"  calculator warm start: {calc_tokens:,} SFT tokens", flush=True)
        for seed in args.calculator_seeds:
            out = args.work / f"calc-rloo-seed{seed}"
            r = train(
                calc,
                "forkgym/Calculator-v0",
                CALCULATOR,
                "rloo",
                seed,
                out,
                args.minutes,
                args.eval_every,
                CALC_TOKENS,
                calc_start,
                True,  # no 30-point stop: the question is whether it gains at all
            )
            results.append(("calculator", "rloo", seed, r, out))
            print(f"  calculator rloo seed {seed}: {json.dumps(r)}", flush=True)

    print(
        f"\nlearning  arithmetic warm start: {sft_tokens:,} SFT tokens; {EVAL_EPISODES} held-out tasks; budget {args.minutes:g} min per run; K=8 x 8 prompts"
    )
    header = f"{'env':11} {'estimator':9} {'seed':>4} {'start':>6} {'best':>6} {'end':>6} {'+30 pts after':>14} {'tokens to +30':>14} {'run s':>6}"
    print(header)
    print("-" * len(header))
    for env, estimator, seed, r, _ in results:
        reached = r["reached"]
        when = f"{reached['seconds']:.0f} s / {reached['step']} st" if reached else "not reached"
        toks = f"{reached['tokens']:,}" if reached else "-"
        print(
            f"{env:11} {estimator:9} {seed:>4} {r['start']:>6.3f} {r['best']:>6.3f} {r['end']:>6.3f} {when:>14} {toks:>14} {r['seconds']:>6.0f}"
        )
    for _, _, seed, r, _ in (x for x in results if x[0] == "calculator"):
        gain = r["best"] - r["start"]
        verdict = "clear gain" if gain >= CLEAR_GAIN else "no clear gain"
        print(
            f"calculator rloo seed {seed}: {r['start']:.3f} -> best {r['best']:.3f}, end {r['end']:.3f} ({gain:+.3f}; >= +{CLEAR_GAIN:.2f}: {verdict})"
        )
    for estimator in args.estimators if not args.skip_arithmetic else []:
        runs = [r for env, e, _, r, _ in results if env == "arithmetic" and e == estimator]
        gains = [r["best"] - r["start"] for r in runs]
        ok = sum(r["reached"] is not None for r in runs)
        print(
            f"arithmetic {estimator}: mean best gain {statistics.mean(gains):+.3f}; +30 points within {args.minutes:g} min in {ok}/{len(runs)} seeds"
        )
    plot_runs(
        [out for *_, out in results],
        args.out,
        labels=[f"{env} {e} s{s}" for env, e, s, _, _ in results],
        title="held-out greedy accuracy vs tokens generated",
    )
    print(f"plot: {args.out}")
    arithmetic_ok = all(r["reached"] for env, *_, r, _ in results if env == "arithmetic")
    calculator_ok = all(
        r["best"] - r["start"] >= CLEAR_GAIN for env, *_, r, _ in results if env == "calculator"
    )
    return 0 if arithmetic_ok and calculator_ok else 1


if __name__ == "__main__":
    sys.exit(main())
