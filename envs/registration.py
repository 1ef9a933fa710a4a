"""Registering forkgym's environments with Gymnasium under the ``forkgym/`` namespace.

Ids follow ``namespace/Name-vN``: ``gym.make("a:b")`` would try to import a module ``a``.
Environments are registered without Gymnasium's order-enforcing and passive-checker wrappers,
so ``gym.make`` returns the environment itself and ``env.fork()``, ``env.get_state()`` and
``env.gold_action()`` are reachable directly (Gymnasium 1.x wrappers do not forward
attributes). Each environment enforces reset-before-step itself, and
:func:`~forkgym.envs.check_llm_env` runs the checks the passive checker would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["ENVIRONMENTS", "EnvInfo", "register_envs"]


@dataclass(frozen=True)
class EnvInfo:
    id: str
    entry_point: str
    summary: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    multi_turn: bool = False


ENVIRONMENTS: dict[str, EnvInfo] = {
    info.id: info
    for info in [
        EnvInfo(
            "forkgym/Arithmetic-v0",
            "forkgym.envs.arithmetic:ArithmeticEnv",
            "Procedural arithmetic: digits, terms, operations and a curriculum level.",
        ),
        EnvInfo(
            "forkgym/WordProblems-v0",
            "forkgym.envs.word_problems:WordProblemsEnv",
            "Procedural multi-step word problems with exact integer answers.",
        ),
        EnvInfo(
            "forkgym/MathDataset-v0",
            "forkgym.envs.dataset:MathDatasetEnv",
            "GSM8K-style or MATH-style JSONL problems from a path (bundled samples by default).",
        ),
        EnvInfo(
            "forkgym/Calculator-v0",
            "forkgym.envs.calculator:CalculatorEnv",
            "Arithmetic too hard to do mentally, with an exact calculator tool.",
            multi_turn=True,
        ),
        EnvInfo(
            "forkgym/PythonTool-v0",
            "forkgym.envs.python_tool:PythonToolEnv",
            "Computational problems with a sandboxed Python tool (CPU, memory, wall-clock limits; no network).",
            multi_turn=True,
        ),
        EnvInfo(
            "forkgym/Inventory-v0",
            "forkgym.envs.inventory:InventoryEnv",
            "Questions about a seeded warehouse database the model must query with tools.",
            multi_turn=True,
        ),
        EnvInfo(
            "forkgym/CheckedSteps-v0",
            "forkgym.envs.checked_steps:CheckedStepsEnv",
            "A chain of arithmetic steps, each result reported to a tool that gives the next (and, with feedback, says whether it was right).",
            multi_turn=True,
        ),
    ]
}


def register_envs() -> None:
    """Register every forkgym environment (idempotent)."""
    for info in ENVIRONMENTS.values():
        if info.id in gym.registry:
            continue
        gym.register(
            id=info.id,
            entry_point=info.entry_point,
            kwargs=dict(info.kwargs),
            order_enforce=False,
            disable_env_checker=True,
        )
