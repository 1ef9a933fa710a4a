"""Seconds per RL step: TRL's GRPOTrainer beside forkgym's trainer, in one run on this CPU.

TRL 1.16's GRPOTrainer has been reported at 0.24-0.27 s per step on this CPU (2-digit addition,
a 1.8M-parameter Llama with a character tokenizer, K=8 x 8 prompts, fp32). This machine's
speed drifts by 2x from day to day, so a quoted figure is no baseline: this script runs both
in the same process, one after the other, on the same shape:

* TRL: ``GRPOTrainer`` on a freshly initialised 1.83M-parameter Llama (7 layers, hidden 128)
  with a character tokenizer built here; prompts ``"12+34="``; reward 1 for the exact sum;
  8 generations per prompt, 8 prompts per step, at most 8 completion tokens, beta 0.
* forkgym: ``Trainer`` with GRPO on ``forkgym/Arithmetic-v0`` (2-digit addition) with the
  default tiny model (1.0M parameters, its BPE tokenizer and chat template), K=8 x 8
  prompts, at most 8 new tokens; prompts without the answer-format sentence
  (``instruction=False``: 17 tokens, chat template included), run before and after TRL,
  and once with the full 25-token prompt for reference.

Both models start untrained. forkgym's completions all run to the 8-token budget (its stop
token is one of ~1,000); TRL's character model draws its end token often enough that about
half its completions stop early (6.5 tokens on average), so TRL does a little less work per
step. Two warm-up steps, then the mean of ``--steps``.
Needs TRL, which only the ``bench`` extra installs (``pip install -e .[bench]``).
Run: ``python benchmarks/trl_step_time.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import tempfile
import time

import torch

from forkgym.bench import TRL_CPU_ARGS, require_trl

K, PROMPTS, NEW_TOKENS, SEED = 8, 8, 8, 0


def addition_tasks(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        tasks.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return tasks


def char_tokenizer():  # a transformers PreTrainedTokenizerFast
    """A character-level tokenizer for digits, '+' and '=' (built locally, nothing fetched)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>"]
    vocab = {tok: i for i, tok in enumerate(specials + list("0123456789+="))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>"
    )


def trl_seconds_per_step(steps: int, out: str) -> tuple[float, int]:
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = char_tokenizer()
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=7,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())

    def exact_sum(completions: list[str], answer: list[str], **_: object) -> list[float]:
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    args = GRPOConfig(
        output_dir=out,
        **TRL_CPU_ARGS,
        seed=SEED,
        max_steps=steps + 2,
        per_device_train_batch_size=K * PROMPTS,
        num_generations=K,
        max_completion_length=NEW_TOKENS,
        learning_rate=1e-4,
        beta=0.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact_sum,
        args=args,
        train_dataset=Dataset.from_list(addition_tasks(K * PROMPTS * (steps + 4), SEED)),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()
    gaps = [b - a for a, b in itertools.pairwise(stamps[1:])]  # after two warm-up steps
    return statistics.mean(gaps), params


def forkgym_seconds_per_step(steps: int, out: str, instruction: bool) -> tuple[float, int]:
    from forkgym.agents.config import TrainConfig
    from forkgym.agents.models import init_model
    from forkgym.agents.trainer import Trainer

    model = init_model(f"{out}/model", corpus_seeds=8)
    config = TrainConfig(
        model=str(model),
        env="forkgym/Arithmetic-v0",
        env_kwargs={
            "system_prompt": None,
            "operations": "+",
            "digits": 2,
            "instruction": instruction,
        },
        estimator="grpo",
        k=K,
        prompts_per_step=PROMPTS,
        max_new_tokens=NEW_TOKENS,
        steps=steps + 2,
        seed=SEED,
        eval_every=0,
        checkpoint_every=0,
        out=f"{out}/run",
        progress=False,
    )
    trainer = Trainer(config)
    params = sum(p.numel() for p in trainer.model.parameters())
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)
        trainer.step += 1
    trainer.log.close()
    return statistics.mean(times[2:]), params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    trl = require_trl()
    if trl is None:
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ours, our_params = forkgym_seconds_per_step(args.steps, f"{tmp}/a", instruction=False)
        theirs, their_params = trl_seconds_per_step(args.steps, f"{tmp}/trl")
        ours_again, _ = forkgym_seconds_per_step(args.steps, f"{tmp}/b", instruction=False)
        full_prompt, _ = forkgym_seconds_per_step(args.steps, f"{tmp}/c", instruction=True)
    forkgym = (ours + ours_again) / 2
    print(
        f"trl_step_time  K={K} x {PROMPTS} prompts, max {NEW_TOKENS} new tokens, 2-digit addition, "
        f"fp32, torch threads={torch.get_num_threads()}, mean of {args.steps} steps after 2 warm-up"
    )
    print(f"{'trainer':44} {'params':>10} {'s/step':>8}")
    print(
        f"{'TRL ' + trl.__version__ + ' GRPOTrainer (char tokenizer)':44} {their_params:>10,} {theirs:>8.3f}"
    )
    print(
        f"{'forkgym GRPO (tiny model, 17-token prompts)':44} {our_params:>10,} {forkgym:>8.3f}"
        f"   (runs before and after TRL: {ours:.3f}, {ours_again:.3f})"
    )
    print(
        f"{'forkgym GRPO (tiny model, 25-token prompts)':44} {our_params:>10,} {full_prompt:>8.3f}"
    )
    verdict = "PASS" if forkgym < theirs else "FAIL"
    print(f"forkgym / TRL time per step: {forkgym / theirs:.2f}x  target < 1: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
