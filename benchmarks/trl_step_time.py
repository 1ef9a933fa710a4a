"""Seconds per RL step: TRL's GRPOTrainer beside forkgym's trainer, same model, in one run.

TRL 1.16's GRPOTrainer has been reported at 0.24-0.27 s per step on this CPU (2-digit addition,
K=8 x 8 prompts, fp32). This machine's speed drifts by 2x from day to day, so a quoted figure
is no baseline: this script runs both trainers in the same process, one after the other, on
the very same work:

* the same model: forkgym's default tiny model (1.0M parameters, untrained), built once here
  with ``init_model(dir, corpus_seeds=8)``; each trainer loads its own copy of that directory
  (``load_policy_model`` for TRL, ``TrainConfig(model=dir)`` for forkgym), so both start from
  the same weights with the same BPE tokenizer and chat template. The parameter counts are
  printed for both (they are equal);
* the same prompts: ``forkgym/Arithmetic-v0`` (2-digit addition) without the answer-format
  sentence (``instruction=False``, no system prompt: 17 tokens with the chat template).
  TRL's dataset is the env's own chat messages for exactly the task seeds forkgym's step ``s``
  draws (``task_seeds(seed, "train", s, 8)``), in order (``shuffle_dataset=False``), as
  conversational prompts, so TRL applies the same chat template; its reward function grades
  each completion by stepping the env reset to that task, as forkgym's rollout does
  (``forkgym.bench.trl_run.trl_env_rows`` / ``trl_env_reward``, shared with
  ``experiments/trl_learning.py``);
* the same stop tokens: forkgym's rollout ends a turn at ``<|im_end|>`` or ``<|endoftext|>``
  (``agents/generation/rollout.py: stop_token_ids``). ``init_model`` writes both into the model's
  ``generation_config.eos_token_id``, and TRL 1.16 stops generation (and masks the completion)
  at the generation config's eos ids plus the tokenizer's eos, so nothing needs setting: TRL
  stops at the same two tokens. The script checks this before it times anything;
* the same shape: K=8 generations x 8 prompts per step, the case's token budget, temperature 1,
  top-p 1, AdamW at 1e-4 with betas (0.9, 0.99), no weight decay, gradient clipping at 1.0,
  no KL term (TRL's ``beta=0``), one optimizer step per generation, fp32 on the CPU.

Two named cases (``--cases``, both by default), each with its own target:

* ``answer-8``: at most 8 new tokens, the short answers above; target: a forkgym step in at
  most 0.5x TRL's time;
* ``worked-23``: the quick preset's shape (``forkgym bench --preset quick``: its env options,
  ``solution_style="worked"``, whose warm-started policy writes worked answers of about 23
  tokens): at most 23 new tokens; target: at most 0.4x TRL's time.

Both models are untrained, so most completions run to the token budget on both sides (which
is what gives the ``worked-23`` case its 23-token completions); the mean completion length
(stop token included) is printed for each, so a difference in work per step shows. In each
case forkgym runs before and after TRL (their mean is compared); in ``answer-8`` once more
with the full 25-token prompt (``instruction=True``) for reference. Two warm-up steps, then
the mean of ``--steps``. Under each case's table: forkgym's step by stage (its own timing
metrics, both runs), and the matrix products of the model's linear layers alone at the step's
shapes, timed here with ``torch.mm`` (``lib.matmul_floor``): a floor the
step cannot go under in fp32 without doing less arithmetic. Needs TRL, which only the ``bench`` extra installs
(``pip install -e .[bench]``). Run: ``python benchmarks/trl_step_time.py [--steps N] [--cases answer-8,worked-23]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from forkgym.bench.presets import PRESETS
from forkgym.bench.trl_run import require_trl, trl_env_reward, trl_env_rows, trl_grpo_args

ENV = "forkgym/Arithmetic-v0"
K, PROMPTS, SEED, LR, BETAS = 8, 8, 0, 1e-4, (0.9, 0.99)
WARMUP = 2
STAGES = ("generate", "forward_and_loss", "backward", "optimizer")


@dataclass(frozen=True)
class Case:
    about: str
    env_kwargs: dict[str, Any]  # without the answer-format sentence (instruction=False)
    new_tokens: int
    target: float  # forkgym's time per step at most this times TRL's
    full_prompt: bool = False  # also time forkgym with the answer-format sentence


_QUICK = PRESETS["quick"].regimes[0]
CASES: dict[str, Case] = {
    "answer-8": Case(
        "2-digit addition, 8-token answers",
        {"system_prompt": None, "operations": "+", "digits": 2, "instruction": False},
        new_tokens=8,
        target=0.5,
        full_prompt=True,
    ),
    "worked-23": Case(
        "the quick preset's 2-digit addition, 23-token worked answers",
        dict(_QUICK.env_kwargs),
        new_tokens=23,
        target=0.4,
    ),
}


def prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """The length of a chat prompt with the assistant header, as both trainers render it."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return len(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def trl_seconds_per_step(steps: int, model_dir: Path, out: str, case: Case) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from forkgym.agents.generation.rollout import stop_token_ids
    from forkgym.agents.models import load_policy_model

    model, tokenizer = load_policy_model(model_dir)
    params = sum(p.numel() for p in model.parameters())
    rows = trl_env_rows(ENV, case.env_kwargs, SEED, steps + WARMUP, PROMPTS)
    lengths: list[int] = []
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    args = GRPOConfig(
        **trl_grpo_args(
            output_dir=out,
            seed=SEED,
            max_steps=steps + WARMUP,
            k=K,
            prompts=PROMPTS,
            max_new_tokens=case.new_tokens,
            lr=LR,
        )
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_env_reward(ENV, case.env_kwargs, lengths),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # no end-of-training metrics dict on stdout
    ours, theirs = sorted(stop_token_ids(tokenizer)), sorted(trainer.eos_token_ids)
    if ours != theirs:
        raise RuntimeError(f"TRL stops at token ids {theirs}, forkgym's rollout at {ours}")
    trainer.train()
    if len(stamps) != steps + WARMUP or len(lengths) != K * PROMPTS * (steps + WARMUP):
        raise RuntimeError(f"TRL ran {len(stamps)} steps and graded {len(lengths)} completions")
    gaps = [b - a for a, b in itertools.pairwise(stamps[WARMUP - 1 :])]  # after the warm-up
    return {
        "s_per_step": statistics.mean(gaps),
        "params": params,
        "completion_tokens": statistics.mean(lengths[K * PROMPTS * WARMUP :]),
        "prompt_tokens": prompt_tokens(tokenizer, rows[0]["prompt"]),
        "stop_ids": theirs,
    }


def forkgym_seconds_per_step(
    steps: int, model_dir: Path, out: str, case: Case, instruction: bool = False
) -> dict[str, Any]:
    from forkgym.agents.run.config import TrainConfig
    from forkgym.agents.run.trainer import Trainer

    config = TrainConfig(
        model=str(model_dir),
        env=ENV,
        env_kwargs={**case.env_kwargs, "instruction": instruction},
        estimator="grpo",
        k=K,
        prompts_per_step=PROMPTS,
        max_new_tokens=case.new_tokens,
        temperature=1.0,
        top_p=1.0,
        lr=LR,
        lr_schedule="constant",
        betas=BETAS,
        weight_decay=0.0,
        grad_clip=1.0,
        steps=steps + WARMUP,
        seed=SEED,
        eval_every=0,
        checkpoint_every=0,
        out=f"{out}/run",
        progress=False,
    )
    trainer = Trainer(config)
    params = sum(p.numel() for p in trainer.model.parameters())
    times, tokens, episodes = [], 0, 0
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for step in range(steps + WARMUP):
        start = time.perf_counter()
        metrics = trainer.train_step()
        times.append(time.perf_counter() - start)
        trainer.step += 1
        if step >= WARMUP:
            tokens += metrics["tokens_generated"]
            episodes += metrics["episodes"]
            for stage, seconds in stages.items():
                seconds.append(metrics.get(f"time/{stage}", 0.0))
    trainer.log.close()
    return {
        "s_per_step": statistics.mean(times[WARMUP:]),
        "params": params,
        "completion_tokens": tokens / episodes,
        "stages": {stage: statistics.mean(seconds) for stage, seconds in stages.items()},
    }


def print_floor(runs: list[dict[str, Any]], model_dir: Path, prompt_len: int, trl_s: float) -> None:
    """forkgym's step by stage (the mean of ``runs``) beside the matrix products of the
    model's linear layers alone at the step's shapes, timed here."""
    from lib.matmul_floor import StepShape, matmul_floor

    from forkgym.agents.models import load_policy_model

    step = statistics.mean(r["s_per_step"] for r in runs)
    stage = {s: statistics.mean(r["stages"][s] for r in runs) for s in STAGES}
    learner = stage["forward_and_loss"] + stage["backward"]
    other = step - stage["generate"] - learner - stage["optimizer"]
    print(
        f"forkgym's step by stage: generation {stage['generate']:.3f} s, learner "
        f"{learner:.3f} (forward and loss {stage['forward_and_loss']:.3f}, backward "
        f"{stage['backward']:.3f}), optimizer {stage['optimizer']:.3f}, the rest {other:.3f}"
    )
    length = round(statistics.mean(r["completion_tokens"] for r in runs))
    floor = matmul_floor(
        load_policy_model(model_dir)[0], StepShape(PROMPTS, K, prompt_len, max(length, 1))
    )
    both = floor["generation"] + floor["learner"]
    print(
        f"matrix products of the linear layers alone at these shapes (torch.mm here, fp32): "
        f"generation {floor['generation']:.3f} s ({floor['generation_gflop']:.1f} GFLOP), "
        f"learner {floor['learner']:.3f} s ({floor['learner_gflop']:.1f} GFLOP); "
        f"{both:.3f} s = {both / trl_s:.2f}x TRL's step, {both / step:.0%} of forkgym's"
    )


def run_case(name: str, case: Case, steps: int, model_dir: Path, tmp: str, trl: Any) -> float:
    """Time forkgym, TRL, forkgym again (and the full prompt where asked); print the rows and
    return forkgym's time per step over TRL's."""
    from forkgym.agents.models import load_tokenizer

    ours = forkgym_seconds_per_step(steps, model_dir, f"{tmp}/{name}-a", case)
    theirs = trl_seconds_per_step(steps, model_dir, f"{tmp}/{name}-trl", case)
    again = forkgym_seconds_per_step(steps, model_dir, f"{tmp}/{name}-b", case)
    short_prompt = theirs["prompt_tokens"]
    forkgym = (ours["s_per_step"] + again["s_per_step"]) / 2
    forkgym_len = (ours["completion_tokens"] + again["completion_tokens"]) / 2
    rows = [
        (
            f"TRL {trl.__version__} GRPOTrainer ({short_prompt}-token prompts)",
            theirs,
            theirs["s_per_step"],
            theirs["completion_tokens"],
            "",
        ),
        (
            f"forkgym GRPO ({short_prompt}-token prompts)",
            ours,
            forkgym,
            forkgym_len,
            f"   (runs before and after TRL: {ours['s_per_step']:.3f}, {again['s_per_step']:.3f})",
        ),
    ]
    if case.full_prompt:
        full = forkgym_seconds_per_step(steps, model_dir, f"{tmp}/{name}-c", case, True)
        messages = trl_env_rows(ENV, {**case.env_kwargs, "instruction": True}, SEED, 1, 1)
        full_prompt = prompt_tokens(load_tokenizer(model_dir), messages[0]["prompt"])
        rows.append(
            (
                f"forkgym GRPO ({full_prompt}-token prompts)",
                full,
                full["s_per_step"],
                full["completion_tokens"],
                "",
            )
        )
    print(
        f"\ncase {name}: {case.about}; K={K} x {PROMPTS} prompts, max {case.new_tokens} new "
        f"tokens; both stop at token ids {theirs['stop_ids']}"
    )
    print(f"{'trainer':46} {'params':>10} {'s/step':>8} {'tokens/completion':>18}")
    for label, r, seconds, length, note in rows:
        print(f"{label:46} {r['params']:>10,} {seconds:>8.3f} {length:>18.2f}{note}")
    print_floor([ours, again], model_dir, short_prompt, theirs["s_per_step"])
    ratio = forkgym / theirs["s_per_step"]
    verdict = "PASS" if ratio <= case.target else "FAIL"
    print(
        f"forkgym / TRL time per step ({name}, {short_prompt}-token prompts): {ratio:.2f}x  "
        f"target <= {case.target}x: {verdict}"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}"
    )
    args = parser.parse_args()
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown or not names:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    trl = require_trl()
    if trl is None:
        return 2
    from forkgym.agents.models import init_model

    print(
        f"trl_step_time  same model (forkgym tiny, untrained), {ENV}, lr {LR:g}, fp32, "
        f"torch threads={torch.get_num_threads()}, mean of {args.steps} steps after {WARMUP} "
        "warm-up"
    )
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = init_model(Path(tmp) / "model", corpus_seeds=8)  # both trainers load it
        for name in names:
            run_case(name, CASES[name], args.steps, model_dir, tmp, trl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
