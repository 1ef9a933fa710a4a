"""Learner step time with one and two data-parallel ranks (gloo, CPU), replicated and
sharded (FSDP2), in one run.

The update of one training step (forward, loss, backward, gradient all-reduce, optimizer) on
a fixed batch shaped like the default recipe's: K=8 branches x 16 prompts, 48-token prompts,
32 generated tokens, PPO-clip with token-mean, micro-batches of 32, on the default tiny model
(random weights: the time does not depend on them). One rank gets the whole batch and both
cores (2 torch threads); two ranks get 8 prompts' groups each and one core each (1 thread),
once with whole copies of the model and once with FSDP2 shards of it. Generation is not included: it splits across ranks with no communication at all.

Run: ``python benchmarks/learner_dp_step.py [--steps N] [--size tiny|small]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.learner.sharding import shard_model
from forkgym.agents.learner.stage import Learner
from forkgym.agents.models import model_config
from forkgym.agents.run.config import TrainConfig
from forkgym.verifiers import Outcome

K, PROMPTS, PROMPT_LEN, NEW_TOKENS = 8, 16, 48, 32


def batch(groups: list[int]) -> tuple[TokenBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    built = []
    for p in groups:
        prompt = torch.randint(3, 1000, (PROMPT_LEN,), generator=torch.Generator().manual_seed(p)).tolist()  # fmt: skip
        eps = []
        for b in range(K):
            n = int(torch.randint(NEW_TOKENS // 2, NEW_TOKENS + 1, (1,), generator=g))
            ids = prompt + torch.randint(3, 1000, (n,), generator=g).tolist()
            mask = [0] * PROMPT_LEN + [1] * n
            logprobs = [0.0] * PROMPT_LEN + [-2.0] * n
            eps.append(Episode(p, b, "sampled", f"t{p}", ids, mask, logprobs, PROMPT_LEN,
                               outcome=Outcome.from_status("correct" if b % 2 else "incorrect")))  # fmt: skip
        built.append(Group(f"t{p}", p, eps))
    tokens = TokenBatch.from_rollouts(RolloutBatch.from_groups(built, K), 0)
    advantages = torch.tensor([1.0 if b % 2 else -1.0 for _ in groups for b in range(K)])
    return tokens, advantages


def timed_steps(size: str, groups: list[int], steps: int, shard: bool = False) -> list[float]:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(model_config(size))
    if shard:
        shard_model(model)
    config = TrainConfig(loss="ppo_clip", reduction="token_mean", micro_batch_size=32, lr=1e-4)
    learner = Learner(model, config, max_episode_tokens=NEW_TOKENS)
    tokens, advantages = batch(groups)
    times = []
    for step in range(steps + 2):  # two warm-up steps
        if dist.is_initialized():
            dist.barrier()
        start = time.perf_counter()
        learner.update(tokens, advantages, step)
        if dist.is_initialized():
            dist.barrier()  # a step ends when the slowest rank's does
        times.append(time.perf_counter() - start)
    return times[2:]


def rank_main(rank: int, world: int, port: int, size: str, steps: int, out: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)  # fmt: skip
    for mode in ("replicate", "shard"):
        times = timed_steps(size, list(range(PROMPTS))[rank::world], steps, mode == "shard")
        if rank == 0:
            out[mode] = times
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--size", default="tiny")
    args = parser.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(2)
    one = timed_steps(args.size, list(range(PROMPTS)), args.steps)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(2, port, args.size, args.steps, out), nprocs=2, join=True)
        two, sharded = list(out["replicate"]), list(out["shard"])
    m1 = statistics.mean(one)
    print(
        f"learner_dp_step  size={args.size}  batch K={K} x {PROMPTS} prompts, {PROMPT_LEN}+<={NEW_TOKENS} tokens  steps={args.steps}"
    )
    print(
        f"{'ranks':>5} {'model':>10} {'threads/rank':>12} {'s/step mean':>12} {'min':>7} {'max':>7} {'vs 1 rank':>10}"
    )
    for ranks, how, threads, t in ((1, "whole", 2, one), (2, "replicated", 1, two), (2, "sharded", 1, sharded)):  # fmt: skip
        print(
            f"{ranks:>5} {how:>10} {threads:>12} {statistics.mean(t):>12.3f} {min(t):>7.3f} {max(t):>7.3f} {m1 / statistics.mean(t):>9.2f}x"
        )
    print(
        f"cpu count: {os.cpu_count()}; replicated ranks all-reduce one flat gradient per "
        "optimizer step over gloo; sharded ranks (FSDP2) all-gather each layer's weights per "
        "pass and reduce-scatter its gradients"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
