"""The ``reward`` and ``adv`` stages: a step's rewards to the advantages the loss multiplies.

``shaping.py`` adds the optional reward terms (DAPO's overlong punishment, a KL penalty in the
reward). ``base.py`` is the seam: :class:`Algorithm`, :class:`Advantages` and the
:data:`ALGORITHMS` registry. The built-in algorithms: ``algorithms.py`` (``critic_free.py``: a
registered estimator of ``estimators.py`` over the ``[P, K]`` grid), ``ppo.py`` (a learned
critic, ``critic.py``'s GAE), ``vine.py`` (Monte Carlo values from exact forks), ``raft.py``
(rejection sampling) and ``gigpo.py`` (anchor-state groups of exact env states).
"""

from typing import TYPE_CHECKING

from forkgym.surface import surface

if TYPE_CHECKING:
    from .algorithms import ALGORITHMS, build_algorithm
    from .base import Advantages, Algorithm
    from .critic_free import CriticFree
    from .estimators import ESTIMATORS, get_estimator
    from .shaping import RewardShaping

__all__ = [
    "ALGORITHMS",
    "ESTIMATORS",
    "Advantages",
    "Algorithm",
    "CriticFree",
    "RewardShaping",
    "build_algorithm",
    "get_estimator",
]
__getattr__, __dir__ = surface(
    __name__,
    {
        "ALGORITHMS": ".algorithms",
        "Advantages": ".base",
        "Algorithm": ".base",
        "CriticFree": ".critic_free",
        "ESTIMATORS": ".estimators",
        "RewardShaping": ".shaping",
        "build_algorithm": ".algorithms",
        "get_estimator": ".estimators",
    },
)
