"""Gymnasium text environments (math and tool use) with exactly reproducible, forkable resets.

``import forkgym.envs`` registers every environment under the ``forkgym/`` namespace, so
``gymnasium.make("forkgym/Arithmetic-v0")`` works. Every environment grades final answers with
a verifier from :mod:`forkgym.verifiers` (or any object with the same ``verify`` method, such
as the HTTP client) and reports a :class:`~forkgym.verifiers.Status` in ``info``.
"""

if __name__ != "forkgym.envs":  # imported as a top-level `envs` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.envs; install forkgym "
        "(`pip install -e .`) and import forkgym.envs instead of `envs`"
    )

from .base import TextEnv, Turn
from .checker import LLMEnvCheckError, check_llm_env
from .registration import ENVIRONMENTS, EnvInfo, register_envs
from .spaces import UnicodeText, chat_observation_space
from .task import Task
from .wrapped import episode_outcome, fork

register_envs()

__all__ = [
    "ENVIRONMENTS",
    "EnvInfo",
    "LLMEnvCheckError",
    "Task",
    "TextEnv",
    "Turn",
    "UnicodeText",
    "chat_observation_space",
    "check_llm_env",
    "episode_outcome",
    "fork",
    "register_envs",
]
