"""One rank of a data-parallel Learner step on the tiny model (gloo, CPU), or the single
process doing the same steps on the whole batch. Run as a script:

    python learner_dp_worker.py MODEL_DIR OUT_DIR MODE RANK WORLD PORT [PARALLEL]

MODE ``two_steps``: steps 0 and 1 on this rank's share, for every reduction; writes the
weights after each step (rank 0) and the learner's checkpoint after step 0. MODE
``resume``: loads the step-0 checkpoint another world size wrote (OUT_DIR/resume_from) and
runs step 1 on this rank's share. Every rank gets whole groups: rank r takes groups r::WORLD.
PARALLEL ``replicate`` (the default: whole copies, gradients all-reduced) or ``shard`` (FSDP2,
agents/learner/sharding.py); files are named after the world size, and ``-shard`` for the latter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.learner.reductions import REDUCTIONS
from forkgym.agents.learner.sharding import (
    full_state_dict,
    is_sharded,
    load_full_state_dict,
    shard_model,
)
from forkgym.agents.learner.stage import Learner
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.config import TrainConfig
from forkgym.verifiers import Outcome

K = 4
GROUPS = [  # (statuses, generated lengths) of each group: uneven lengths on purpose
    (["correct", "incorrect", "incorrect", "correct"], [3, 5, 2, 6]),
    (["incorrect", "correct", "incorrect", "incorrect"], [7, 1, 4, 2]),
    (["correct", "correct", "incorrect", "correct"], [2, 2, 8, 5]),
]
ADVANTAGES = [[1.0, -1.0, -1.0, 1.0], [-0.5, 1.5, -0.5, -0.5], [0.5, 0.5, -1.5, 0.5]]


def share(groups: list[int]) -> tuple[TokenBatch, torch.Tensor]:
    """The token batch and advantages of these groups (ids 3.. after a 2-token prompt)."""
    built = []
    for g in groups:
        statuses, lengths = GROUPS[g]
        eps = []
        for b, (status, n) in enumerate(zip(statuses, lengths, strict=True)):
            ids = [5, 6 + g, *range(3, 3 + n)]
            eps.append(Episode(g, b, "sampled", f"t{g}", ids, [0, 0] + [1] * n, [0.0, 0.0] + [-2.0] * n, 2,
                               outcome=Outcome.from_status(status), truncated=False))  # fmt: skip
        built.append(Group(f"t{g}", g, eps))
    tokens = TokenBatch.from_rollouts(RolloutBatch.from_groups(built, K), 0)
    return tokens, torch.tensor([a for g in groups for a in ADVANTAGES[g]])


def config(reduction: str) -> TrainConfig:
    # the full forward on every side: a sharded model always uses it, and prefix sharing's
    # rounding depends on which rows share a micro-batch (Adam at lr 1e-2 magnifies it past
    # the tolerance); its equality with the full forward is tests/agents/learner/test_prefix_sharing.py
    return TrainConfig(
        reduction=reduction, lr=1e-2, micro_batch_size=3, grad_clip=0.5, prefix_sharing=False
    )


def flat(model: torch.nn.Module) -> torch.Tensor:
    """Every weight, whole, in parameter order (gathered from every rank when sharded)."""
    if is_sharded(model):
        state = full_state_dict(model)
        return torch.cat([state[name].flatten() for name, _ in model.named_parameters()])
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main(
    model_dir: str, out: str, mode: str, rank: int, world: int, port: int, parallel: str
) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)  # fmt: skip
    out_dir = Path(out)
    tokens, advantages = share(list(range(len(GROUPS)))[rank::world])
    tag = f"w{world}" + ("-shard" if parallel == "shard" else "")
    for reduction in REDUCTIONS:
        model = load_policy_model(model_dir)[0]
        if parallel == "shard" and world > 1:
            shard_model(model)
        learner = Learner(model, config(reduction), max_episode_tokens=8)
        steps = (0, 1)
        if mode == "resume":
            state = torch.load(out_dir / "resume_from" / f"{reduction}.pt", weights_only=False)
            load_full_state_dict(model, state["model"])
            learner.load_state_dict(state["optimizer"])
            steps = (1,)
        for step in steps:
            learner.set_lr(step)
            learner.update(tokens, advantages, step)
            weights = flat(model)  # every rank takes part in gathering sharded weights
            if rank == 0:
                torch.save(weights, out_dir / f"{mode}-{tag}-{reduction}-step{step}.pt")
            if step == 0:
                if is_sharded(model):
                    whole = full_state_dict(model, rank0_only=True)
                else:
                    whole = model.state_dict()
                checkpoint = {"model": whole, "optimizer": learner.state_dict()}
                if rank == 0:
                    torch.save(checkpoint, out_dir / f"ckpt-{tag}-{reduction}.pt")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    parallel = sys.argv[7] if len(sys.argv) > 7 else "replicate"
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), parallel)  # fmt: skip
