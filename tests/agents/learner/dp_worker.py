"""A tiny policy-gradient problem shared by the micro-batch tests and a real 2-rank gloo run.

The "model" is one replicated parameter vector W: ``logprobs = -softplus(features @ W)``.
A data-parallel step gives each rank some rows of the batch, splits them into micro-batches,
accumulates gradients, and then syncs W's gradient across ranks, which is exactly what a
trainer does with a real model. Run as a script, this file is one rank:

    python dp_worker.py RANK WORLD PORT OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from forkgym.agents.learner.losses import get_loss
from forkgym.agents.learner.reductions import REDUCTIONS, build_normaliser

B, T, D = 10, 7, 3
MAX_NEW_TOKENS = T + 3
LOSS_CONFIGS = {
    "vanilla_pg": {},
    "ppo_clip": {"eps_low": 0.1, "eps_high": 0.15, "dual_clip": 1.5},
    "gspo": {"eps_low": 0.02, "eps_high": 0.03},
    "sapo": {"kl_coef": 0.1, "kl_estimator": "k3"},
}
# rank -> its rows, split into micro-batches (uneven on purpose)
RANK_MICROBATCHES = {0: [[0, 1, 2]], 1: [[3, 4, 5, 6, 7], [8], [9]]}


def make_problem(seed: int = 0, b: int = B, t: int = T) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(b, t, D, generator=g, dtype=torch.float64)
    w_old = 0.3 * torch.randn(D, generator=g, dtype=torch.float64)
    w = w_old + 0.3 * torch.randn(D, generator=g, dtype=torch.float64)
    old = -F.softplus(features @ w_old)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0] = t  # at least one full row
    return {
        "features": features,
        "w": w,
        "old": old,
        "ref": old + 0.05 * torch.randn(b, t, generator=g, dtype=torch.float64),
        "adv": torch.randn(b, generator=g, dtype=torch.float64),
        "mask": torch.arange(t)[None, :] < lengths[:, None],
    }


def step_grad(
    problem: dict[str, torch.Tensor],
    loss_name: str,
    reduction: str,
    microbatches: list[list[int]],
    gradient_sync: str = "sum",
) -> torch.Tensor:
    """Gradient of W after one step over ``microbatches`` (this rank's rows), before any sync."""
    w = problem["w"].clone().requires_grad_()
    loss_fn = get_loss(
        loss_name, reduction=reduction, max_episode_tokens=MAX_NEW_TOKENS, **LOSS_CONFIGS[loss_name]
    )
    norm = build_normaliser(
        reduction,
        [problem["mask"][rows] for rows in microbatches],
        max_episode_tokens=MAX_NEW_TOKENS,
        gradient_sync=gradient_sync,
    )
    for rows in microbatches:
        logprobs = -F.softplus(problem["features"][rows] @ w)
        loss, _ = loss_fn(
            logprobs,
            problem["old"][rows],
            problem["adv"][rows],
            problem["mask"][rows],
            ref_logprobs=problem["ref"][rows],
            normaliser=norm,
        )
        loss.backward()
    return w.grad.detach().clone()


def main(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    problem = make_problem()
    results: dict[str, list[float]] = {}
    for sync in ("sum", "mean"):
        for loss_name in LOSS_CONFIGS:
            for reduction in REDUCTIONS:
                grad = step_grad(problem, loss_name, reduction, RANK_MICROBATCHES[rank], sync)
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                if sync == "mean":  # what DistributedDataParallel does
                    grad /= world
                results[f"{sync}/{loss_name}/{reduction}"] = grad.tolist()
    try:  # a loss without a step normaliser must refuse to guess under DP
        get_loss("ppo_clip")(problem["old"], problem["old"], problem["adv"], problem["mask"])
        results["refused_without_normaliser"] = [0.0]
    except ValueError:
        results["refused_without_normaliser"] = [1.0]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(results, fh)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
