"""The ``drift`` and ``update`` stages: the trainer's own log-probs, the loss and the optimizer.

:class:`Learner` (``stage.py``) owns the policy's model and optimizer: it scores the engine's
samples with the trainer's weights and corrects for the difference (``drift.py``), runs the
mini- and micro-batches of each update under one normaliser (``passes.py``,
``reductions.py``), the registered token loss (``losses.py``), the log-prob head
(``logprobs.py``; each distinct prompt once per micro-batch: ``prefix_sharing.py``), the
learning-rate schedule (``schedules.py``), the loss diagnostics (``diagnostics.py``) and FSDP2
shards (``sharding.py``).
"""

from typing import TYPE_CHECKING

from forkgym.surface import surface

if TYPE_CHECKING:
    from .losses import LOSSES, get_loss
    from .reductions import REDUCTIONS
    from .schedules import LR_SCHEDULES
    from .stage import Learner, Update

__all__ = ["LOSSES", "LR_SCHEDULES", "REDUCTIONS", "Learner", "Update", "get_loss"]
__getattr__, __dir__ = surface(
    __name__,
    {
        "LOSSES": ".losses",
        "LR_SCHEDULES": ".schedules",
        "Learner": ".stage",
        "REDUCTIONS": ".reductions",
        "Update": ".stage",
        "get_loss": ".losses",
    },
)
