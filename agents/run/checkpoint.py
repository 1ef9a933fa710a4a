"""Checkpoints of a run: complete or absent, the newest few kept.

``RUN_DIR/checkpoints/step_NNNNNNN/`` holds the model and tokenizer (``save_pretrained``, so
the folder is also a model any loader reads), the optimizer (``optimizer.pt``), the
algorithm's own state (``algorithm.pt``: an estimator's running baseline, a value model) and
``trainer_state.json`` (step, weight version, torch's RNG state, the run's running totals),
and in asynchronous mode ``prefetched.json``: the batches generated ahead of the checkpoint
with older weights (agents/generation/prefetch.py), every rank's, which the resumed run trains on. A checkpoint is
written to a ``.tmp`` folder and renamed into place, so a crash mid-write leaves no half
checkpoint.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Checkpoints", "Restored"]


@dataclass
class Restored:
    step: int
    weight_version: int
    optimizer: dict[str, Any]
    algorithm: dict[str, Any]
    torch_rng: torch.Tensor
    counters: dict[str, float]  # running totals of the run (tokens generated, ...)
    prefetched: dict[str, Any] | None = None  # asynchronous mode's batches generated ahead


class Checkpoints:
    """Writes and finds the checkpoints under ``run_dir/checkpoints``."""

    def __init__(self, run_dir: str | Path, keep: int = 2) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep = max(1, keep)

    def all(self) -> list[Path]:
        return sorted(self.root.glob("step_*[0-9]"))

    def save(
        self,
        step: int,
        *,
        model: Any,
        tokenizer: Any,
        optimizer: dict[str, Any],
        algorithm: dict[str, Any],
        weight_version: int,
        counters: dict[str, float] | None = None,
        prefetched: dict[str, Any] | None = None,
        model_state: dict[str, Any] | None = None,
    ) -> Path:
        """``model_state``: the model's whole weights when the module holds only a shard of them
        (agents/learner/sharding.py); by default the module's own."""
        path = self.root / f"step_{step:07d}"
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        model.save_pretrained(
            tmp, **({"state_dict": model_state} if model_state is not None else {})
        )
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer, tmp / "optimizer.pt")
        torch.save(algorithm, tmp / "algorithm.pt")
        state = {
            "step": step,
            "weight_version": weight_version,
            "torch_rng": torch.get_rng_state().tolist(),
            "counters": dict(counters or {}),
        }
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        if prefetched is not None:
            (tmp / "prefetched.json").write_text(json.dumps(prefetched))
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)  # a checkpoint directory is complete or absent
        for old in self.all()[: -self.keep]:
            shutil.rmtree(old)
        return path

    def load_latest(
        self, model: torch.nn.Module, load: Callable[[dict[str, Any]], Any] | None = None
    ) -> Restored:
        """Load the newest checkpoint's weights into ``model`` (with ``load(weights)`` when
        given: a sharded model; it returns the missing and unexpected keys as
        ``load_state_dict`` does); the rest is returned."""
        checkpoints = self.all()
        if not checkpoints:
            raise FileNotFoundError(f"no checkpoint to resume from in {self.root}")
        path = checkpoints[-1]
        from safetensors.torch import load_file

        weights = load_file(str(path / "model.safetensors"))
        if load is None:
            missing, unexpected = model.load_state_dict(weights, strict=False)
        else:
            missing, unexpected = load(weights)
        if unexpected or [m for m in missing if "lm_head" not in m]:  # tied lm_head is not stored
            raise RuntimeError(
                f"checkpoint {path} does not match the model: {missing} {unexpected}"
            )
        state = json.loads((path / "trainer_state.json").read_text())
        ahead = path / "prefetched.json"
        algorithm_file = path / "algorithm.pt"
        if algorithm_file.exists():
            algorithm = torch.load(algorithm_file, weights_only=True)
        else:  # checkpoints written before algorithms had their own file
            algorithm = {"estimator": state.get("estimator")}
        return Restored(
            step=int(state["step"]),
            weight_version=int(state["weight_version"]),
            optimizer=torch.load(path / "optimizer.pt", weights_only=True),
            algorithm=algorithm,
            torch_rng=torch.tensor(state["torch_rng"], dtype=torch.uint8),
            counters=dict(state.get("counters", {})),
            prefetched=json.loads(ahead.read_text()) if ahead.exists() else None,
        )
