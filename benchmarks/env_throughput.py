"""Environment throughput: reset+step episodes per second with scripted policies.

For every registered environment, two scripted policies play whole episodes: ``gold`` (the
environment's own gold actions, tool calls included) and ``wrong`` (one fixed wrong final
answer). No model runs; the figure is the environment's own cost, verification included.
The verifier's verdict cache is off, so every answer is really graded (integer answers by the
exact fast path, symbolic ones by the 2-worker pool). One process, one thread for the env.
episodes/s is the best of ``--repeats`` clean runs (median beside it); the reset / step / grade
split comes from a separate instrumented pass.

Then a profile of the arithmetic env says where an episode's time goes.
Run: ``python benchmarks/env_throughput.py [--episodes N]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import gymnasium as gym
from lib.recipes import TimedVerifier

import forkgym.envs
from forkgym.verifiers import MathVerifier

TARGETS = {"forkgym/Arithmetic-v0": 5000.0, "forkgym/WordProblems-v0": 5000.0}
WRONG = "I am fairly sure the answer is $\\boxed{-123456789}$."
SLOW = {"forkgym/PythonTool-v0": 20}  # sandboxed processes: far fewer episodes


def run_episodes(env, policy: str, episodes: int) -> float:
    """Play ``episodes`` whole episodes; returns the share that ended correct."""
    base = env.unwrapped
    correct = 0
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(
                base.gold_action() if policy == "gold" else WRONG
            )
            done = terminated or truncated
        correct += info["status"] == "correct"
    return correct / episodes


def time_split(env, policy: str, episodes: int, verifier: MathVerifier) -> dict[str, float]:
    """A separate, instrumented pass: time in reset, in step, and in grading within step."""
    base = env.unwrapped
    base.verifier = timed = TimedVerifier(verifier)
    reset_s = step_s = 0.0
    for seed in range(episodes):
        t0 = time.perf_counter()
        env.reset(seed=seed)
        t1 = time.perf_counter()
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(
                base.gold_action() if policy == "gold" else WRONG
            )
            done = terminated or truncated
        step_s += time.perf_counter() - t1
        reset_s += t1 - t0
    base.verifier = verifier
    scale = 1e6 / episodes
    return {
        "reset_us": reset_s * scale,
        "step_us": step_s * scale,
        "grade_us": timed.seconds * scale,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5000)
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs per env and policy; the best is shown"
    )
    args = parser.parse_args()
    verifier = MathVerifier(workers=2, cache_size=0)
    verifier.start()
    print(
        f"env_throughput  {args.episodes} episodes per env and policy (PythonTool: "
        f"{SLOW['forkgym/PythonTool-v0']}), best of {args.repeats} clean runs; verdict cache off"
    )
    header = f"{'env':26} {'policy':6} {'episodes/s':>11} {'(median)':>9} {'reset us':>9} {'step us':>9} {'grade us':>9} {'correct':>8}"
    print(header)
    print("-" * len(header))
    failed = False
    for env_id in forkgym.envs.ENVIRONMENTS:
        env = gym.make(env_id, verifier=verifier)
        n = SLOW.get(env_id, args.episodes)
        run_episodes(env, "gold", min(n, 50))  # warm-up
        for policy in ("gold", "wrong"):
            # The best of several clean runs: this shared VM's speed varies by +-15% from run
            # to run, and the fastest run is the one least disturbed by other load.
            rates = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                correct = run_episodes(env, policy, n)
                rates.append(n / (time.perf_counter() - start))
            r = {
                "eps": max(rates),
                "median_eps": sorted(rates)[len(rates) // 2],
                "correct": correct,
            }
            r.update(time_split(env, policy, max(1, n // 5), verifier))
            mark = ""
            if env_id in TARGETS:
                ok = r["eps"] >= TARGETS[env_id]
                failed |= not ok
                mark = f"  target >= {TARGETS[env_id]:,.0f}/s: {'PASS' if ok else 'FAIL'}"
            print(
                f"{env_id:26} {policy:6} {r['eps']:>11,.0f} {r['median_eps']:>9,.0f} {r['reset_us']:>9.1f} {r['step_us']:>9.1f} "
                f"{r['grade_us']:>9.1f} {r['correct']:>8.0%}{mark}"
            )
        env.close()

    env = gym.make("forkgym/Arithmetic-v0", verifier=verifier)
    profiler = cProfile.Profile()
    profiler.enable()
    for seed in range(args.episodes):
        env.reset(seed=seed)
        env.step(env.unwrapped.gold_action())
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    print("\nwhere an Arithmetic-v0 gold episode's time goes (cProfile, by own time):")
    print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))
    verifier.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
