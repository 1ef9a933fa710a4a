"""Advantages + loss + backward: forkgym's vectorised path vs per-group Python loops.

One seeded synthetic batch: P prompts x K rollouts, responses of up to T tokens (prefix
action masks, lengths uniform in [T/16, T]), binary rewards with ~1% infrastructure failures,
float32 log-probs. Every implementation computes GRPO advantages (population std, invalid
entries excluded), broadcasts them under the action mask, applies the PPO clipped surrogate
(eps 0.2 / 0.28) with a global ``token_mean`` reduction and backpropagates to the log-probs.

* ``forkgym vectorised``: ``get_estimator("grpo")`` + ``get_loss("ppo_clip")`` with a step
  normaliser;
* ``per-group loop (slices)``: the straightforward implementation, a Python loop over groups
  (statistics of each group in Python, the loss of each group's ``[K, T]`` slice in torch),
  the baseline the target (>= 20x) is stated against;
* ``per-group loop (torch.split)``: the same loop over ``torch.split`` views, which avoids
  the full-size gradient each slice's backward writes; shown so the speed-up is not read as
  pure Python overhead.

Advantages and all three gradients are checked equal before anything is timed. Run:
``python benchmarks/estimator_throughput.py [--quick] [--repeats N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch

from forkgym.agents.advantages.estimators import get_estimator
from forkgym.agents.learner.losses import get_loss
from forkgym.agents.learner.reductions import build_normaliser

EPS_LOW, EPS_HIGH = 0.2, 0.28
TARGET = 20.0


def make_batch(p: int, k: int, t: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b = p * k
    rewards = (torch.rand(p, k, generator=g) < torch.rand(p, 1, generator=g)).float()
    valid = torch.rand(p, k, generator=g) > 0.01
    rewards = torch.where(valid, rewards, torch.nan)
    lengths = torch.randint(max(t // 16, 1), t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    old = -torch.rand(b, t, generator=g) * 3.0
    logprobs = old + 0.1 * torch.randn(b, t, generator=g)
    return {"rewards": rewards, "valid": valid, "mask": mask, "old": old, "logprobs": logprobs}


def vectorised_advantages(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    adv, _ = get_estimator("grpo")(batch["rewards"], batch["valid"])
    return adv


def vectorised(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logprobs = batch["logprobs"].clone().requires_grad_()
    adv = vectorised_advantages(batch)
    mask = batch["mask"] & batch["valid"].reshape(-1)[:, None]  # infra failures leave the loss
    loss_fn = get_loss("ppo_clip", eps_low=EPS_LOW, eps_high=EPS_HIGH, reduction="token_mean")
    norm = build_normaliser("token_mean", mask)
    loss, _ = loss_fn(logprobs, batch["old"], adv.reshape(-1), mask, normaliser=norm)
    loss.backward()
    return logprobs.grad


def loop_advantages(rewards: list[list[float]], valid: list[list[bool]]) -> list[list[float]]:
    """GRPO per group in Python: population std, invalid entries excluded and given 0."""
    out = []
    for row, ok_row in zip(rewards, valid, strict=True):  # the per-group loop
        vals = [r for r, ok in zip(row, ok_row, strict=True) if ok]
        adv = [0.0] * len(row)
        if len(vals) >= 2 and max(vals) != min(vals):
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((r - mean) ** 2 for r in vals) / len(vals))
            if std > 1e-6:
                adv = [(r - mean) / std if ok else 0.0 for r, ok in zip(row, ok_row, strict=True)]
        out.append(adv)
    return out


def _group_loss(lp, old, m, adv) -> torch.Tensor:
    a = torch.tensor(adv)[:, None]
    ratio = torch.exp(lp - old)
    surr = torch.minimum(ratio * a, ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * a)
    return torch.where(m, -surr, 0.0).sum()


def loop(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Straightforward: one slice of the batch per group, losses summed, one backward."""
    logprobs = batch["logprobs"].clone().requires_grad_()
    p, k = batch["rewards"].shape
    mask = batch["mask"] & batch["valid"].reshape(-1)[:, None]
    advs = loop_advantages(batch["rewards"].tolist(), batch["valid"].tolist())
    loss = torch.zeros(())
    for i in range(p):  # the per-group loop
        rows = slice(i * k, (i + 1) * k)
        loss = loss + _group_loss(logprobs[rows], batch["old"][rows], mask[rows], advs[i])
    loss = loss / int(mask.sum())
    loss.backward()
    return logprobs.grad


def loop_split(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Tuned loop: ``torch.split`` views (one backward node for all groups), stacked losses.

    Slicing a tensor that requires grad once per group makes each slice's backward write a
    full-size gradient; most of ``loop``'s time is that, so this row shows what is left.
    """
    logprobs = batch["logprobs"].clone().requires_grad_()
    k = batch["rewards"].size(1)
    mask = batch["mask"] & batch["valid"].reshape(-1)[:, None]
    advs = loop_advantages(batch["rewards"].tolist(), batch["valid"].tolist())
    chunks = zip(logprobs.split(k), batch["old"].split(k), mask.split(k), advs, strict=True)
    parts = [_group_loss(lp, old, m, adv) for lp, old, m, adv in chunks]  # per-group loop
    loss = torch.stack(parts).sum() / int(mask.sum())
    loss.backward()
    return logprobs.grad


def timed(fn, batch, repeats: int) -> tuple[float, torch.Tensor]:
    out = fn(batch)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(batch)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="P=64 (a smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=20261205)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    p, k, t = (64 if args.quick else 512), 16, 1024
    batch = make_batch(p, k, t, args.seed)

    # same advantages and the same gradient, checked before anything is timed
    reference = torch.tensor(loop_advantages(batch["rewards"].tolist(), batch["valid"].tolist()))
    torch.testing.assert_close(vectorised_advantages(batch), reference, rtol=1e-6, atol=1e-7)
    grad = vectorised(batch)
    for fn in (loop, loop_split):
        torch.testing.assert_close(fn(batch), grad, rtol=1e-4, atol=1e-9)

    rows = [
        (
            "advantages",
            "per-group Python loop",
            lambda b: loop_advantages(b["rewards"].tolist(), b["valid"].tolist()),
        ),
        ("advantages", "forkgym vectorised", vectorised_advantages),
        ("adv + loss + backward", "per-group loop (slices)", loop),
        ("adv + loss + backward", "per-group loop (torch.split)", loop_split),
        ("adv + loss + backward", "forkgym vectorised", vectorised),
    ]
    results = {(phase, name): timed(fn, batch, args.repeats)[0] for phase, name, fn in rows}
    tokens = int(batch["mask"].sum())
    print(
        f"estimator_throughput  seed={args.seed}  P={p} K={k} T={t}  action tokens={tokens:,}  "
        f"torch threads={torch.get_num_threads()}  median of {args.repeats}"
    )
    print("grpo advantages; ppo_clip (0.2/0.28) token_mean loss; backward to the log-probs")
    print("outputs checked equal before timing: advantages, and gradients of all three paths")
    header = f"{'phase':23} {'implementation':30} {'ms':>10} {'vs loop':>8}"
    print(header)
    print("-" * len(header))
    baseline = {
        "advantages": results["advantages", "per-group Python loop"],
        "adv + loss + backward": results["adv + loss + backward", "per-group loop (slices)"],
    }
    failed = False
    for phase, name, _ in rows:
        ms = results[phase, name]
        speedup = baseline[phase] / ms
        mark = ""
        if phase == "adv + loss + backward" and name == "forkgym vectorised":
            tuned = results[phase, "per-group loop (torch.split)"] / ms
            if args.quick:  # the target is stated for P=512; a smoke run only reports
                verdict = "not judged (--quick)"
            else:
                failed = speedup < TARGET
                verdict = "FAIL" if failed else "PASS"
            mark = f"  target >= {TARGET:g}x: {verdict}  ({tuned:.1f}x the split loop)"
        print(f"{phase:23} {name:30} {ms:>10.1f} {speedup:>7.1f}x{mark}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
