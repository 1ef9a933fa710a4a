"""What the scripts under ``benchmarks/`` and ``experiments/`` share (``from lib.recipes import
...``: ``benchmarks/`` is on the path of its own scripts; ``experiments/`` and the tests put it
there).

* **Recipes** of the learning experiments: the environment settings, token budgets and
  held-out evaluation every run uses (:data:`ARITHMETIC`, :data:`HELD_OUT_RUN`, ...), the
  held-out greedy accuracy (:func:`held_out`) and the SFT warm start that every RL run of an
  experiment starts from (:func:`warm_start`).
* **Inputs** of the verifier benchmarks: seeded mixes of GSM8K-like and MATH-like answers
  (:data:`MIXES`).
* **Timing**: :class:`TimedVerifier` splits a step's time; :func:`vllm_missing` says where a
  script that needs vLLM runs. (TRL's side of a like-for-like run, which ``forkgym bench``'s
  ``trl_grpo`` method uses too, is :mod:`forkgym.bench.trl_run`.)
* **Generation workloads**: the quick preset's first step as a list of generation requests
  (:func:`quick_generation_requests`), what the generator benchmarks time.
"""

from __future__ import annotations

import random
import time
from math import gcd
from pathlib import Path
from typing import Any

from forkgym.bench.held_out import EVAL_SEED  # one held-out stream for bench and experiments

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
    "TimedVerifier",
    "held_out",
    "integer_mix",
    "math_mix",
    "quick_generation_requests",
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
    from forkgym.bench.held_out import held_out_accuracy

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
    from forkgym.agents.run.sft import every_steps, sft

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
        until=every_steps(reached, check_every),
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
    from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
    from forkgym.agents.generation.rollout import stop_token_ids
    from forkgym.agents.seeds import task_seeds
    from forkgym.bench.presets import PRESETS
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
