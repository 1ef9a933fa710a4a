"""The loop: a run's configuration, the trainer, its checkpoints and records.

``config.py`` (:class:`TrainConfig`, every setting documented once; ``config_docs.py``
generates the docs' tables from it), ``trainer.py`` (:class:`Trainer`: the stages in order,
evaluation, stopping, checkpoints), ``checkpoint.py``, ``runlog.py`` (metrics to JSONL, the
store, TensorBoard, W&B), ``plots.py`` (learning curves) and ``sft.py`` (the supervised warm
start a run starts from).
"""

from typing import TYPE_CHECKING

from forkgym.surface import surface

if TYPE_CHECKING:
    from .config import ConfigError, TrainConfig
    from .trainer import Trainer

__all__ = ["ConfigError", "TrainConfig", "Trainer"]
__getattr__, __dir__ = surface(
    __name__,
    {
        "ConfigError": ".config",
        "TrainConfig": ".config",
        "Trainer": ".trainer",
    },
)
