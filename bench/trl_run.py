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
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from .held_out import regime_held_out
from .presets import Preset, Regime

__all__ = [
    "TRL_CPU_ARGS",
    "require_trl",
    "run_trl",
    "trl_env_reward",
    "trl_env_rows",
    "trl_grpo_args",
]


def run_trl(regime: Regime, preset: Preset, seed: int, model_dir: str, folder: Path) -> None:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from forkgym.agents.models import load_policy_model

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
                row.update(
                    regime_held_out(model, tokenizer, regime, preset.held_out_episodes(regime))
                )
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


# -- TRL's side of a like-for-like run ------------------------------------------------------------------------------------

# GRPOConfig settings every TRL baseline here shares: fp32 on the CPU, no logging, saving,
# reporting, progress bar or dataloader workers inside the timed loop.
TRL_CPU_ARGS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "fp16": False,
    "logging_steps": 10_000,
    "save_strategy": "no",
    "report_to": "none",
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


def trl_grpo_args(
    *,
    output_dir: str,
    seed: int,
    max_steps: int,
    k: int,
    prompts: int,
    max_new_tokens: int,
    lr: float,
    schedule: str = "constant",
) -> dict[str, Any]:
    """``GRPOConfig`` keywords for TRL's side of a like-for-like run against forkgym's ``grpo``
    recipe: K generations x ``prompts`` per step, one optimizer step per generation, the
    dataset in order (``shuffle_dataset=False``: step ``s`` gets the tasks of forkgym's step
    ``s``), temperature 1, top-p 1, AdamW with betas (0.9, 0.99), no weight decay, clipping at
    1.0, no KL term, PPO-clip at 0.2 below and 0.28 above (forkgym's ``ppo_clip`` defaults),
    token-mean loss (TRL's ``dapo`` loss type) and group-std-scaled advantages."""
    return {
        **TRL_CPU_ARGS,
        "output_dir": output_dir,
        "seed": seed,
        "max_steps": max_steps,
        "per_device_train_batch_size": k * prompts,
        "num_generations": k,
        "max_completion_length": max_new_tokens,
        "shuffle_dataset": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "learning_rate": lr,
        "lr_scheduler_type": schedule,  # transformers' linear and cosine match forkgym's
        "adam_beta1": 0.9,
        "adam_beta2": 0.99,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "beta": 0.0,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "loss_type": "dapo",
        "scale_rewards": "group",
    }


def require_trl() -> ModuleType | None:
    """TRL, quietened for a timed run; None (with the install line on stderr) without it."""
    try:
        import trl
    except ImportError:
        print("TRL is not installed: pip install -e .[bench]  (or trl==1.16.0)", file=sys.stderr)
        return None
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return trl


def trl_env_rows(
    env_id: str, env_kwargs: dict[str, Any], seed: int, steps: int, prompts: int
) -> list[dict[str, Any]]:
    """TRL dataset rows for the tasks forkgym's trainer draws in steps ``0 .. steps - 1``
    (``task_seeds(seed, "train", step, prompts)``), in that order: ``{"prompt": the env's chat
    messages, "task_seed": ...}``, a conversational prompt, so TRL applies the tokenizer's chat
    template as forkgym does. Step ``s`` of a ``GRPOTrainer`` with ``prompts`` prompts per step
    and ``shuffle_dataset=False`` gets the same tasks as forkgym's step ``s``."""
    from forkgym.agents.seeds import task_seeds
    from forkgym.envs.base import on_side
    from forkgym.integrations.trl import env_rows

    seeds = [s for step in range(steps) for s in task_seeds(seed, "train", step, prompts)]
    return env_rows(env_id, seeds, **on_side(env_kwargs, "train"))  # the trainer's side


def trl_env_reward(
    env_id: str, env_kwargs: dict[str, Any], lengths: list[int] | None = None
) -> Callable[..., list[float]]:
    """A TRL reward function that grades each completion as forkgym's rollout does: the env
    reset to the row's ``task_seed`` and stepped with the completion's text. With ``lengths``,
    the token count of every completion it grades (its stop token included, as TRL passes
    it) is appended there."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import on_side

    grader = gym.make(env_id, **on_side(env_kwargs, "train"))

    def env_reward(
        completions: list, task_seed: list[int], completion_ids: list | None = None, **_: object
    ) -> list[float]:
        if lengths is not None and completion_ids is not None:
            lengths.extend(len(ids) for ids in completion_ids)
        rewards = []
        for completion, s in zip(completions, task_seed, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            grader.reset(seed=s)
            rewards.append(float(grader.step(text)[1]))
        return rewards

    return env_reward
