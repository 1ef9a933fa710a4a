"""How far Vine's Monte Carlo values are from the states' values, against a high-rollout
reference.

Vine values each state with a few continuations (``rollouts``, 4 in the benchmark); a value
that is a mean of ``M`` independent 0/1 rewards has sampling variance ``V(1 - V) / M``, and no
bias when the forked state is exactly the episode's (anything else, a state rebuilt from text
that differs from the one the episode was in, would show as bias). :func:`measure_vine_error`
takes the policy at the end of Vine's first reported seed, samples fresh train-side episodes,
values their states as Vine does, and values the same states again with ``reference``
continuations drawn independently (another step's seeds). It reports the root mean squared
difference beside the one sampling noise alone predicts (``sqrt(mean(V(1 - V)) (1/M +
1/M_ref))``, with ``V`` the reference's value), the mean difference (a bias), and the
explained variance of the episodes' rewards by either set of values (Vine's values as a
critic would be scored).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["VINE_ERROR_SEED", "measure_vine_error", "vine_error_table"]

VINE_ERROR_SEED = 40_000  # the episodes' task stream: train-side, drawn by no run


def measure_vine_error(
    out: Path,
    regime: Any,
    vine_run: Path,
    options: dict[str, Any],
    log: Callable[[str], None],
    *,
    reference: int = 32,
) -> dict[str, Any]:
    """Vine's values (``options``: its ``rollouts``, ``chunk``, ``lines``) against
    ``reference`` continuations per state, on ``regime.vine_error_prompts`` fresh prompts x K
    at the end of ``vine_run`` (its last checkpoint; cached in ``OUT/REGIME/vine_error.json``)."""
    import gymnasium as gym
    import torch

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.agents.advantages.critic import explained_variance
    from forkgym.agents.generation.backends.hf_policy import HFPolicy
    from forkgym.agents.generation.fork_values import ForkValues
    from forkgym.agents.generation.rollout import Rollouts
    from forkgym.agents.models import load_policy_model
    from forkgym.agents.seeds import task_seeds
    from forkgym.envs.base import on_side

    path = out / regime.name / "vine_error.json"
    if path.exists():
        return json.loads(path.read_text())
    t0 = time.perf_counter()
    checkpoints = sorted((vine_run / "checkpoints").glob("step_*[0-9]"))
    if not checkpoints:
        raise RuntimeError(f"{vine_run}: no checkpoint to measure Vine's values at")
    model, tokenizer = load_policy_model(str(checkpoints[-1]))
    model.eval()
    env_kwargs = on_side(regime.env_kwargs, "train")
    runner = Rollouts(lambda: gym.make(regime.env, **env_kwargs), HFPolicy(model, tokenizer, seed=VINE_ERROR_SEED),
                      tokenizer, k=regime.k, max_new_tokens=regime.max_new_tokens, seed=VINE_ERROR_SEED)  # fmt: skip
    batch = runner.collect(task_seeds(VINE_ERROR_SEED, "train", 0, regime.vine_error_prompts))
    rollouts = int(options.get("rollouts", 4))
    shape = {"chunk": options.get("chunk"), "lines": bool(options.get("lines", False))}
    ForkValues(rollouts, **shape)(runner, batch, step=0)
    vine = {id(ep): list(ep.values) for ep in batch.sampled}
    positions = {id(ep): list(ep.value_positions) for ep in batch.sampled}
    ForkValues(reference, **shape)(runner, batch, step=1)  # independent draws
    pairs, rewards = [], []
    for ep in batch.sampled:
        if not ep.valid or ep.value_positions != positions[id(ep)]:
            continue  # a state without a valid continuation in one of the two
        for v, ref in zip(vine[id(ep)], ep.values, strict=True):
            pairs.append((v, ref))
            rewards.append(float(ep.reward))
    v = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    ref = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    r = torch.tensor(rewards, dtype=torch.float64)
    noise = float((ref * (1 - ref)).mean()) * (1 / rollouts + 1 / reference) if pairs else math.nan
    result = {
        "policy": f"{vine_run.name} ({checkpoints[-1].name})",
        "prompts": regime.vine_error_prompts,
        "k": regime.k,
        "rollouts": rollouts,
        "reference": reference,
        "states": len(pairs),
        "accuracy": float(batch.correct.float().mean()),
        "rmse": float(((v - ref) ** 2).mean().sqrt()) if pairs else None,
        "rmse_from_noise": math.sqrt(noise) if pairs else None,
        "bias": float((v - ref).mean()) if pairs else None,
        "ev_vine": explained_variance(r, v),
        "ev_reference": explained_variance(r, ref),
        "seconds": time.perf_counter() - t0,
    }
    path.write_text(json.dumps(result, indent=1))
    log(f"  vine's values vs {reference} continuations: rmse {result['rmse']}, predicted by noise {result['rmse_from_noise']} ({result['seconds']:.0f} s)")  # fmt: skip
    return result


def vine_error_table(out: Path, regime: Any) -> list[str]:
    """The report's lines on Vine's value error (nothing when it was not measured)."""
    path = out / regime.name / "vine_error.json"
    if not path.exists():
        return []
    e = json.loads(path.read_text())

    def f(x: float | None) -> str:
        return "undefined" if x is None else f"{x:.3f}"

    return [
        f"Vine's values against a reference: the policy at the end of {e['policy']}, "
        f"{e['prompts']} fresh train-side prompts x K = {e['k']} (accuracy {e['accuracy']:.2f}), "
        f"{e['states']} states each valued with Vine's {e['rollouts']} continuations and again "
        f"with {e['reference']} independent ones.",
        "",
        "| root mean squared difference | predicted by sampling noise alone | mean difference (bias) | explained variance of the reward: Vine's values | the reference's |",
        "|---|---|---|---|---|",
        f"| {f(e['rmse'])} | {f(e['rmse_from_noise'])} | {f(e['bias'])} | {f(e['ev_vine'])} | {f(e['ev_reference'])} |",
        "",
    ]
