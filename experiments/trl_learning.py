"""Both counts in one run: TRL's GRPOTrainer and forkgym from one warm start, same tasks.

TRL 1.16's GRPOTrainer has been reported lifting a character-level model from 25% to 49.5%
held-out greedy accuracy in 300 steps (K=8 x 8 prompts) at 0.24-0.27 s per step. That is
another model, another prompt and another day's machine; this script makes the comparison
here, on equal terms, and reports both counts (held-out accuracy gained in 300 steps, and
seconds per step) for each trainer:

* one warm start: the default tiny model after SFT on arithmetic demonstrations, to 20-50%
  held-out greedy accuracy (``lib.recipes.warm_start``, the one ``experiments/learning.py``
  uses);
* the same environment (``forkgym/Arithmetic-v0``, 2-digit addition, worked answers, prompts
  without the format sentence), the same chat template, stop tokens and verifier: TRL gets the
  env's chat messages as conversational prompts and a reward function that grades each
  completion by stepping the env reset to that task;
* the same tasks: TRL's dataset is exactly the task seeds forkgym's step ``s`` draws, in
  order (``shuffle_dataset=False``), so TRL's step ``s`` trains on forkgym's step-``s`` tasks;
* the same hyper-parameters: K=8, 8 prompts per step, at most 32 new tokens, temperature 1,
  AdamW at a constant 1e-4 (``--lr``, ``--lr-schedule``: both trainers; a linear or cosine
  decay ends at ``--steps``, and so do forkgym's runs) with betas (0.9, 0.99), gradient
  clipping at 1.0, no KL term, one optimizer step per generation, the PPO-clip loss at
  0.2 below and 0.28 above (forkgym's ``ppo_clip`` defaults; TRL's own default is 0.2 both
  ways, which runs before 2026-12-03 used) with token-mean reduction (TRL's default ``dapo``
  loss) and group-std-scaled advantages (TRL's default): ``forkgym.bench.trl_run.trl_grpo_args``;
* the same held-out evaluation (200 tasks, greedy) at steps 0, 100, 200 and 300; evaluation
  time is left out of the seconds per step.

forkgym runs GRPO (the same estimator as TRL) and RLOO, each for as long as TRL's 300 steps
took in the same seed (evaluations included on both sides), so the table gives accuracy at
step 300 (learning per step) and at TRL's wall-clock time (what the faster step buys). Per
seed, each trainer starts from the same weights; the seed sets sampling (TRL's ``seed``,
forkgym's ``seed``).
``--set KEY=VALUE`` (repeatable) changes forkgym's recipe, e.g. ``--set lr_schedule=linear
--set lr=3e-4``; ``--skip-trl`` runs forkgym alone for ``--steps`` steps (the same runs, step
for step, as beside TRL: a wall-clock budget only ends a run), for recipe sweeps.
Needs TRL (``pip install -e .[bench]``) unless ``--skip-trl``.
Run: ``python experiments/trl_learning.py [--seeds 0 1 2] [--steps 300]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import forkgym.envs  # noqa: F401
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from forkgym.bench.trl_run import require_trl, trl_env_reward, trl_env_rows, trl_grpo_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # lib.recipes
from lib.recipes import (
    ARITH_TOKENS,
    ARITHMETIC_SHORT,
    EVAL_EPISODES,
    HELD_OUT_RUN,
    held_out,
    warm_start,
)

ENV = "forkgym/Arithmetic-v0"
K, PROMPTS, BETAS = 8, 8, (0.9, 0.99)


def trl_run(
    warm: Path, seed: int, steps: int, eval_every: int, out: str, lr: float, schedule: str
) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from forkgym.agents.models import load_policy_model

    model, tokenizer = load_policy_model(warm)
    rows = trl_env_rows(ENV, ARITHMETIC_SHORT, seed, steps, PROMPTS)
    env_reward = trl_env_reward(ENV, ARITHMETIC_SHORT)

    evals: dict[int, float] = {}
    eval_s = 0.0
    stamps: list[float] = []

    def evaluate_now(step: int) -> None:
        nonlocal eval_s
        t0 = time.perf_counter()
        evals[step] = held_out(model, tokenizer, ENV, ARITHMETIC_SHORT, ARITH_TOKENS)
        eval_s += time.perf_counter() - t0
        print(f"    TRL seed {seed} step {step}: held-out {evals[step]:.3f}", flush=True)

    class Hooks(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            nonlocal eval_s
            evaluate_now(0)
            eval_s = 0.0  # the clock starts after the step-0 evaluation
            stamps.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % eval_every == 0 or state.global_step == steps:
                evaluate_now(state.global_step)

    args = GRPOConfig(
        **trl_grpo_args(
            output_dir=out,
            seed=seed,
            max_steps=steps,
            k=K,
            prompts=PROMPTS,
            max_new_tokens=ARITH_TOKENS,
            lr=lr,
            schedule=schedule,
        )
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Hooks()],
    )
    trainer.train()
    wall = time.perf_counter() - stamps[0]
    return {
        "evals": evals,
        "s_per_step": (wall - eval_s) / steps,  # evaluations left out
        "wall": wall,  # evaluations included, as in forkgym's time budget
        "steps": steps,
    }


def forkgym_run(
    warm: Path,
    estimator: str,
    seed: int,
    budget_s: float | None,
    steps: int,
    eval_every: int,
    out: str,
    lr: float,
    schedule: str,
    overrides: list[str],
) -> dict:
    """Train until ``budget_s`` of wall-clock time (evaluations included) has passed, or for
    ``steps`` steps without a budget or with a decaying learning rate (whose decay ends at
    ``steps``); ``overrides`` (``key=value``) change the recipe."""
    values = dict(
        model=str(warm),
        env=ENV,
        env_kwargs=ARITHMETIC_SHORT,
        estimator=estimator,
        seed=seed,
        steps=steps if budget_s is None else 1_000_000,
        time_budget_s=budget_s,
        prompts_per_step=PROMPTS,
        k=K,
        max_new_tokens=ARITH_TOKENS,
        lr=lr,
        lr_schedule=schedule,
        betas=BETAS,
        grad_clip=1.0,
        eval_every=eval_every,
        out=out,
        **HELD_OUT_RUN,
    )
    config = TrainConfig.load(None, overrides, **values)
    if config.lr_schedule != "constant":  # the decay ends at `steps`, and so does the run
        config = dataclasses.replace(config, steps=steps)
    began = time.perf_counter()
    Trainer(config).run()
    wall = time.perf_counter() - began
    rows = read_metrics(out)
    evals = {m["step"]: m["eval_accuracy"] for m in rows if m.get("eval_accuracy") is not None}
    for step, acc in evals.items():
        print(f"    forkgym {estimator} seed {seed} step {step}: held-out {acc:.3f}", flush=True)
    eval_s = sum(m.get("time/eval") or 0.0 for m in rows)
    steps = rows[-1]["step"]
    return {"evals": evals, "s_per_step": (wall - eval_s) / steps, "wall": wall, "steps": steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--estimators", nargs="*", default=["grpo", "rloo"], help="none: TRL alone")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-learning"))
    parser.add_argument("--lr", type=float, default=1e-4, help="peak rate, both trainers")
    parser.add_argument(
        "--lr-schedule",
        choices=["constant", "linear", "cosine"],
        default="constant",
        help="both trainers; a decay ends at --steps",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a forkgym TrainConfig override (repeatable)",
    )
    parser.add_argument("--skip-trl", action="store_true", help="forkgym alone, for --steps steps")
    args = parser.parse_args()
    if args.skip_trl and not args.estimators:
        parser.error("--skip-trl with no --estimators leaves nothing to run")
    try:  # a bad override fails now, not after the warm start
        TrainConfig.load(None, args.overrides)
    except ConfigError as exc:
        parser.error(str(exc))
    trl = None
    if not args.skip_trl:
        trl = require_trl()
        if trl is None:
            return 2
    args.work.mkdir(parents=True, exist_ok=True)
    warm, start, sft_tokens = warm_start(
        args.work, ENV, ARITHMETIC_SHORT, ARITH_TOKENS, 0.20, 2_000_000
    )
    print(f"warm start: {start:.3f} held-out greedy accuracy after {sft_tokens:,} SFT tokens")
    results: list[tuple[str, int, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            budget = None
            if trl is not None:
                name = f"TRL {trl.__version__} GRPOTrainer"
                theirs = trl_run(
                    warm,
                    seed,
                    args.steps,
                    args.eval_every,
                    f"{tmp}/trl{seed}",
                    args.lr,
                    args.lr_schedule,
                )
                results.append((name, seed, theirs))
                budget = theirs["wall"]
            for estimator in args.estimators:
                r = forkgym_run(
                    warm,
                    estimator,
                    seed,
                    budget,
                    args.steps,
                    args.eval_every,
                    f"{tmp}/{estimator}{seed}",
                    args.lr,
                    args.lr_schedule,
                    args.overrides,
                )
                results.append((f"forkgym {estimator.upper()}", seed, r))
    print(
        f"\ntrl_learning  {ENV} 2-digit addition, K={K} x {PROMPTS} prompts, lr {args.lr:g} {args.lr_schedule}, "
        f"{args.steps} steps, {EVAL_EPISODES} held-out tasks (greedy), torch threads={torch.get_num_threads()}"
    )
    if args.overrides:
        print(f"forkgym's recipe differs from that by: {' '.join(args.overrides)}")
    marks = list(range(0, args.steps + 1, args.eval_every))
    timed_col = trl is not None  # accuracy in TRL's wall-clock time needs TRL's runs
    header = f"{'trainer':28} {'seed':>4} " + " ".join(f"{'@' + str(m):>6}" for m in marks)
    header += f" {'gain@' + str(args.steps):>9} {'s/step':>7}"
    header += f" {'in TRL time':>17}" if timed_col else ""
    print(header)
    print("-" * len(header))
    for name, seed, r in results:
        accs = " ".join(f"{r['evals'].get(m, float('nan')):>6.3f}" for m in marks)
        gain = r["evals"].get(args.steps, float("nan")) - r["evals"][0]
        line = f"{name:28} {seed:>4} {accs} {gain:>+9.3f} {r['s_per_step']:>7.3f}"
        if timed_col:
            line += f" {r['evals'][r['steps']]:.3f} @{r['steps']} st".rjust(18)
        print(line)
    if timed_col:
        print(
            f"in TRL time: held-out accuracy once the run has trained for as long as TRL's "
            f"{args.steps} steps took in the same seed (evaluations included in both), and the "
            "steps it got through"
        )
    print()
    for name in dict.fromkeys(n for n, _, _ in results):
        runs = [r for n, _, r in results if n == name]
        gains = [r["evals"].get(args.steps, float("nan")) - r["evals"][0] for r in runs]
        summary = (
            f"{name:28} over {len(runs)} seeds: mean gain {statistics.mean(gains):+.3f} in "
            f"{args.steps} steps"
        )
        if timed_col:
            timed = [r["evals"][r["steps"]] - r["evals"][0] for r in runs]
            summary += f", {statistics.mean(timed):+.3f} in TRL's time"
        print(f"{summary}; mean s/step {statistics.mean(r['s_per_step'] for r in runs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
