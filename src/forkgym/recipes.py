"""What the scripts under ``benchmarks/`` and ``experiments/`` share, importable by all.

* **Recipes** of the learning experiments: the environment settings, token budgets and
  held-out evaluation every run uses (:data:`ARITHMETIC`, :data:`HELD_OUT_RUN`, ...), the
  held-out greedy accuracy (:func:`held_out`) and the SFT warm start that every RL run of an
  experiment starts from (:func:`warm_start`).
* **Inputs** of the verifier benchmarks: seeded mixes of GSM8K-like and MATH-like answers
  (:data:`MIXES`).
* **Baselines**: the settings TRL's trainers run with here (:data:`TRL_CPU_ARGS`), a quiet
  import of TRL (:func:`require_trl`), and an environment's own tasks for TRL's
  ``GRPOTrainer`` (:func:`trl_env_rows`, :func:`trl_env_reward`: the prompts and grading
  forkgym's trainer sees); :class:`TimedVerifier` splits a step's time.
* **Generation workloads**: the quick preset's first step as a list of generation requests
  (:func:`quick_generation_requests`), what the generator benchmarks time.
"""

from __future__ import annotations

import os
import random
import sys
import time
import warnings
from collections.abc import Callable
from math import gcd
from pathlib import Path
from types import ModuleType
from typing import Any

from forkgym.agents.bench.held_out import EVAL_SEED  # one held-out stream for bench and experiments

__all__ = [
    "ARITHMETIC",
    "ARITHMETIC_SHORT",
    "ARITH_TOKENS",
    "CALCULATOR",
    "CALC_TOKENS",
    "EVAL_EPISODES",
    "EVAL_SEED",
    "HELD_OUT_RUN",
    "MIXES",
    "TRL_CPU_ARGS",
    "TimedVerifier",
    "held_out",
    "integer_mix",
    "math_mix",
    "quick_generation_requests",
    "require_trl",
    "trl_env_reward",
    "trl_env_rows",
    "trl_grpo_args",
    "vllm_missing",
    "warm_start",
]

# -- recipes of the learning experiments ---------------------------------------------------------

ARITHMETIC: dict[str, Any] = {"system_prompt": None, "operations": "+", "solution_style": "worked"}
ARITH_TOKENS = 32  # the worked answer of a 3-digit sum is 24 tokens with its stop token
ARITHMETIC_SHORT = {**ARITHMETIC, "instruction": False}
CALCULATOR = {
    "system_prompt": None,
    "digits": 2,
    "terms": 2,
    "operations": "+*",
    "solution_style": "answer",
}
CALC_TOKENS = 40  # per turn: the tool call is 29 tokens, the boxed answer 9-10
EVAL_EPISODES = 200
# every benchmark training run: greedy accuracy on the same held-out tasks, one final checkpoint
HELD_OUT_RUN: dict[str, Any] = {
    "eval_episodes": EVAL_EPISODES,
    "eval_seed": EVAL_SEED,
    "eval_k": 0,
    "checkpoint_every": 0,
    "keep_checkpoints": 1,
}


def held_out(
    model: Any, tokenizer: Any, env_id: str, env_kwargs: dict[str, Any], max_new_tokens: int
) -> float:
    """Greedy accuracy on the :data:`EVAL_EPISODES` held-out tasks every experiment shares
    (the held-out evaluation of ``forkgym bench``, at this fixed size)."""
    from forkgym.agents.bench.held_out import held_out_accuracy

    result = held_out_accuracy(model, tokenizer, env_id, env_kwargs, max_new_tokens, EVAL_EPISODES)
    return result["eval_accuracy"]


def warm_start(
    work: Path,
    env_id: str,
    env_kwargs: dict[str, Any],
    max_new_tokens: int,
    low: float,
    max_tokens: int,
    check_every: int = 10,
) -> tuple[Path, float, int]:
    """The default tiny model after one SFT run on ``env_id``'s gold demonstrations,
    checked every ``check_every`` steps and stopped at ``low`` held-out accuracy (at most
    ``max_tokens`` tokens); the untrained model is built once in ``work`` and reused.
    Returns ``(model dir, accuracy, SFT tokens)``."""
    from forkgym.agents.models import init_model, load_policy_model
    from forkgym.agents.sft import sft

    base = work / "base"
    if not (base / "config.json").exists():
        init_model(base)
    out = work / f"{env_id.split('/')[-1]}-warm"
    seen: dict[str, float] = {}

    def reached(model: Any, tokenizer: Any, tokens: int) -> bool:
        seen["accuracy"], seen["tokens"] = (
            held_out(model, tokenizer, env_id, env_kwargs, max_new_tokens),
            tokens,
        )
        print(
            f"  warm start {env_id}: {tokens:,} SFT tokens -> held-out greedy accuracy {seen['accuracy']:.3f}",
            flush=True,
        )
        return seen["accuracy"] >= low

    result = sft(
        str(base),
        env_id,
        tokens=max_tokens,
        out=out,
        seed=0,
        env_kwargs=env_kwargs,
        until=reached,
        check_every=check_every,
    )
    model, tokenizer = load_policy_model(out)
    accuracy = held_out(model, tokenizer, env_id, env_kwargs, max_new_tokens)
    if accuracy < low:
        raise RuntimeError(
            f"the warm start reached only {accuracy:.3f} after {result['tokens']:,} tokens"
        )
    return out, accuracy, int(result["tokens"])


# -- inputs of the verifier benchmarks ---------------------------------------------------------

NAMES = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana"]
THINGS = ["apples", "stamps", "marbles", "tickets", "books", "coins"]


def integer_mix(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        name, thing = rng.choice(NAMES), rng.choice(THINGS)
        total = rng.randint(10, 900)
        lines = [f"{name} starts with {total} {thing}. Let's work through it step by step."]
        for step in range(rng.randint(4, 9)):
            x = rng.randint(2, 60)
            op = rng.choice("+-*") if total < 50_000 else "-"
            new = {"+": total + x, "-": total - x, "*": total * x}[op]
            lines.append(
                f"Step {step + 1}: {name} now has {total} {thing}; after the next event "
                f"({op}{x}) that becomes {total} {op} {x} = {new} {thing}."
            )
            total = new
        roll = rng.random()
        if roll < 0.70:
            final = f"The answer is $\\boxed{{{total}}}$."
        elif roll < 0.78:
            final = f"The answer is $\\boxed{{{total:,}}}$."
        elif roll < 0.96:
            final = f"The answer is $\\boxed{{{total + rng.choice([-1, 1]) * rng.randint(1, 9)}}}$."
        else:
            final = f"So {name} ends with {total} {thing}."
        items.append((str(total), " ".join(lines) + " " + final))
    return items


def _math_item(rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(["fraction", "radical", "tuple", "interval", "set", "polynomial"])
    wrong = rng.random() < 0.45
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    if kind == "fraction":
        p, q = a, b + a
        g = gcd(p, q)
        p, q = p // g, q // g
        ref = f"\\frac{{{p}}}{{{q}}}"
        k = rng.randint(2, 5)
        ans = f"\\dfrac{{{k * p + (1 if wrong else 0)}}}{{{k * q}}}"
    elif kind == "radical":
        b = rng.choice([2, 3, 5, 6, 7, 10, 11, 13])
        ref = f"{a}\\sqrt{{{b}}}"
        ans = f"\\sqrt{{{(a + (1 if wrong else 0)) ** 2 * b}}}"
    elif kind == "tuple":
        ref = f"({a}, {-b})"
        ans = f"({-b}, {a})" if wrong else f"({a},-{b})"
    elif kind == "interval":
        lo, hi = -a, b
        ref = f"[{lo}, {hi})"
        ans = f"({lo},{hi}]" if wrong else f"[{lo},{hi})"
    elif kind == "set":
        c = a + b
        ref = f"\\{{{a}, {b}, {c}\\}}"
        ans = f"\\{{{c},{b},{a + (1 if wrong else 0)}\\}}"
    else:
        ref = f"x^2 + {a + b}x + {a * b}"
        ans = f"(x+{a})(x{'-' if wrong else '+'}{b})"
    text = (
        f"We simplify carefully and check the {kind} against the conditions. So $\\boxed{{{ans}}}$."
    )
    return ref, text


def math_mix(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    seen: dict[tuple[str, str], None] = {}
    while len(seen) < n:
        seen.setdefault(_math_item(rng), None)
    return list(seen)


MIXES = {"integer": integer_mix, "math": math_mix}


# -- baselines ------------------------------------------------------------------------------------

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


def vllm_missing(script: str) -> bool:
    """Whether vLLM is absent from this interpreter; if so, says where ``benchmarks/<script>``
    runs (the vLLM environment) on stdout, for a script that then exits 0."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return False
    print(
        f"{script}: needs vLLM; run it with the vLLM environment's python (python3 dev.py "
        f"vllm-env, then .venv-vllm/bin/python benchmarks/{script}.py)"
    )
    return True


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


class TimedVerifier:
    """Wraps a verifier to add up the time spent grading (to split a step's time)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0

    def verify(self, reference: str, response: str) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.verify(reference, response)
        finally:
            self.seconds += time.perf_counter() - start


# -- generation workloads -------------------------------------------------------------------------


def quick_generation_requests(tokenizer: Any, new_tokens: int = 23) -> list[Any]:
    """The generation requests of ``forkgym bench --preset quick``'s first training step: its
    env's training-side prompts for the step's task seeds (chat template, generation prompt),
    K seeded samples of each at temperature 1, at most ``new_tokens`` new tokens (23: the
    preset's mean worked answer), the rollout's stop tokens."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.agents.bench.presets import PRESETS
    from forkgym.agents.policy import GenerationRequest, SamplingParams
    from forkgym.agents.rollout import stop_token_ids
    from forkgym.agents.seeds import task_seeds
    from forkgym.envs.base import on_side

    regime = PRESETS["quick"].regimes[0]
    env = gym.make(regime.env, **on_side(regime.env_kwargs, "train"))
    stops = tuple(stop_token_ids(tokenizer))
    requests = []
    for p, task in enumerate(task_seeds(0, "train", 0, regime.prompts_per_step)):
        obs, _ = env.reset(seed=task)
        ids = tokenizer.apply_chat_template(
            list(obs["messages"]), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for k in range(regime.k):
            seed = p * regime.k + k
            params = SamplingParams(max_new_tokens=new_tokens, seed=seed, stop_token_ids=stops)
            requests.append(GenerationRequest(tuple(ids), params))
    env.close()
    return requests
