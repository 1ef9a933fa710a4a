"""The ``gen`` stage: tasks to a step's :class:`~forkgym.agents.batch.RolloutBatch`.

:class:`Generation` (``stage.py``) is the one owner: it builds the engines, collects each
step's groups (``collect.py``: task seeds, dynamic sampling; ``rollout.py``: token-exact
multi-turn episodes), synchronously or ahead of the learner (``prefetch.py``), on one engine or
a pool (``engine_pool.py``), values states from exact forks when the algorithm asks
(``fork_values.py``), records what it cost (``ledger.py``) and each episode
(``episode_log.py``), evaluates on held-out tasks (``evaluate.py``) and pushes the learner's
weights to the engines (``sync``). What generates is a backend (``backends/``).
"""

from typing import TYPE_CHECKING

from forkgym.surface import surface

if TYPE_CHECKING:
    from .evaluate import evaluate
    from .ledger import GenerationLedger
    from .rollout import Rollouts
    from .stage import Generation, build_engines, build_generation

__all__ = [
    "Generation",
    "GenerationLedger",
    "Rollouts",
    "build_engines",
    "build_generation",
    "evaluate",
]
__getattr__, __dir__ = surface(
    __name__,
    {
        "Generation": ".stage",
        "GenerationLedger": ".ledger",
        "Rollouts": ".rollout",
        "build_engines": ".stage",
        "build_generation": ".stage",
        "evaluate": ".evaluate",
    },
)
