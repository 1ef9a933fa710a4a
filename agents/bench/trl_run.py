"""TRL's GRPOTrainer as a benchmark method, on forkgym's terms (needs the ``bench`` extra).

The same warm-started model and tokenizer (forkgym's), the same chat-template prompts and the
same task seeds in the same order (``shuffle_dataset=False``), graded by the same environment;
K, prompts per step, token limit, learning rate, AdamW betas, gradient clipping, temperature
and the clip range (0.2 below, 0.28 above, as forkgym's ``ppo_clip``) are set to the regime's;
no KL term; group-std-scaled advantages with a token-mean loss (TRL's ``dapo`` loss type), the
recipe of forkgym's ``grpo`` method. The run stops at the step that reaches the budget of
generated tokens, counted from the completion ids TRL hands its reward function (stop token
included, as forkgym counts it), and is evaluated by forkgym's held-out evaluation at the same
fractions of the budget. Logged like a forkgym run, so one report reads both.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from .held_out import regime_held_out
from .presets import Preset, Regime

__all__ = ["run_trl"]


def run_trl(regime: Regime, preset: Preset, seed: int, model_dir: str, folder: Path) -> None:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from forkgym.recipes import require_trl, trl_env_reward, trl_env_rows, trl_grpo_args

    from ..models import load_policy_model

    require_trl()  # quiet warnings, tokenizers' parallelism
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model, tokenizer = load_policy_model(model_dir)
    per_step = regime.k * regime.prompts_per_step
    max_steps = regime.budget_tokens // per_step + 1  # every completion has >= 1 token
    rows = trl_env_rows(regime.env, regime.env_kwargs, seed, max_steps, regime.prompts_per_step)
    lengths: list[int] = []
    grade = trl_env_reward(regime.env, regime.env_kwargs, lengths)
    rewards_seen: list[float] = []

    def reward(*args: Any, **kwargs: Any) -> list[float]:
        out = grade(*args, **kwargs)
        rewards_seen.extend(out)
        return out

    reward.__name__ = "env_reward"
    marks = [int(f * regime.budget_tokens) for f in preset.eval_fractions]
    log = (folder / "metrics.jsonl").open("w", encoding="utf-8")
    state = {"total": 0, "rewards": 0}

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state_, control, **kwargs):
            state["clock"] = time.perf_counter()

        def on_step_end(self, args, state_, control, **kwargs):
            now = time.perf_counter()
            total = sum(lengths)
            batch_rewards = rewards_seen[state["rewards"] :]
            row: dict[str, Any] = {
                "step": state_.global_step,
                "tokens_generated": total - state["total"],
                "tokens_generated_total": total,
                "tokens_trained": total - state["total"],
                "reward_mean": sum(batch_rewards) / max(len(batch_rewards), 1),
                "time/step": now - state["clock"],
            }
            if any(state["total"] < m <= total for m in marks) or total >= regime.budget_tokens:
                row.update(regime_held_out(model, tokenizer, regime, preset.eval_episodes))
            state["total"], state["rewards"] = total, len(rewards_seen)
            log.write(json.dumps(row) + "\n")
            log.flush()
            if total >= regime.budget_tokens:
                control.should_training_stop = True
            state["clock"] = time.perf_counter()

    args = GRPOConfig(
        **trl_grpo_args(
            output_dir=str(folder / "trl"),
            seed=seed,
            max_steps=max_steps,
            k=regime.k,
            prompts=regime.prompts_per_step,
            max_new_tokens=regime.max_new_tokens,
            lr=regime.lr,
        )
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Budget()],
    )
    trainer.remove_callback(PrinterCallback)  # no metrics dict on stdout
    trainer.train()
    log.close()
    shutil.rmtree(folder / "trl", ignore_errors=True)
