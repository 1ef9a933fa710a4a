"""Deliberately broken environments: check_llm_env must catch each of them.

Registered on import under ``forkgymtest/``; ids are made as
``tests.envs.broken_envs:forkgymtest/Name-v0`` so that fresh subprocesses import this module.
"""

import random

import gymnasium as gym
import numpy as np

from forkgym.envs.arithmetic import ArithmeticEnv
from forkgym.envs.calculator import CalculatorEnv
from forkgym.envs.task import Task


class GlobalRandomEnv(ArithmeticEnv):
    """Draws from the global `random`: same-process checks can pass, other processes differ."""

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        task = super().generate_task(rng, task_id)
        return Task(**{**task.to_dict(), "prompt": task.prompt + f" (#{random.randrange(10**6)})"})


class SetOrderEnv(ArithmeticEnv):
    """Picks from a set of strings: the set's order follows PYTHONHASHSEED."""

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        task = super().generate_task(rng, task_id)
        fruit = list({"apples", "pears", "plums", "figs"})[int(rng.integers(4))]
        return Task(**{**task.to_dict(), "prompt": f"{task.prompt} ({fruit})"})


class HashSeededEnv(ArithmeticEnv):
    """Uses hash() of a string: differs under another PYTHONHASHSEED."""

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        task = super().generate_task(rng, task_id)
        return Task(**{**task.to_dict(), "answer": str(hash(task_id) % 7)})


class ForgetfulEnv(CalculatorEnv):
    """Keeps episode data outside get_state(): a fork loses it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden_calls = 0

    def calculator(self, expression: str):
        self.hidden_calls += 1
        result = super().calculator(expression)
        return f"{result.content} (call {self.hidden_calls})"

    calculator.__tool__ = CalculatorEnv.calculator.__tool__


BROKEN = [
    ("GlobalRandom", GlobalRandomEnv),
    ("SetOrder", SetOrderEnv),
    ("HashSeeded", HashSeededEnv),
    ("Forgetful", ForgetfulEnv),
]
for name, cls in BROKEN:
    env_id = f"forkgymtest/{name}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=cls, order_enforce=False, disable_env_checker=True)
