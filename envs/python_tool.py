"""``forkgym/PythonTool-v0``: computational problems solved with a sandboxed Python tool.

Each call runs in a fresh, limited process (:mod:`forkgym.envs.sandbox`) inside the operating
system's walls (:mod:`forkgym.envs.sandbox.isolation`: bubblewrap namespaces, a uid of the call's
own, seccomp): standard library only, no network, CPU/wall-clock limits, and memory,
processes and scratch space bounded for the call as a whole (a cgroup per call; where none is
writable, rlimits dividing the same budget: ``info["sandbox"]`` says which), a scratch tmpfs
inside the sandbox, ``random`` seeded from the task. Where the machine cannot build that
sandbox the env refuses to start, unless ``isolation="unsafe-local"`` is passed by name.
Nothing persists between calls and no call can take what another needs, so an episode's tool
results depend only on the code sent, and a fork replays them exactly. The env computes every
reference answer itself, exactly, without the sandbox.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Turn
from .sandbox import SandboxLimits, containment, run_python
from .sandbox import isolation as iso
from .sandbox.remote import run_remote
from .task import Task
from .tool_env import ToolEnv, ToolResult, tool

__all__ = ["PythonToolEnv"]


def _count_primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"
    for p in range(2, int(n**0.5) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytes(len(range(p * p, n, p)))
    return sum(sieve)


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _fibonacci_mod(n: int, m: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    return a


def _problem(rng: np.random.Generator) -> tuple[str, str, int, str]:
    """(family, question, answer, gold code)."""
    family = ["digit_sum", "primes", "fibonacci", "divisors", "collatz"][int(rng.integers(5))]
    if family == "digit_sum":
        k = int(rng.integers(100, 3000))
        return (
            family,
            f"What is the sum of the decimal digits of 2^{k}?",
            sum(map(int, str(2**k))),
            f"print(sum(int(d) for d in str(2**{k})))",
        )
    if family == "primes":
        n = int(rng.integers(1_000, 50_000))
        code = f"n = {n}\nsieve = [True] * n\nsieve[0] = sieve[1] = False\nfor p in range(2, int(n ** 0.5) + 1):\n    if sieve[p]:\n        for q in range(p * p, n, p):\n            sieve[q] = False\nprint(sum(sieve))"
        return family, f"How many prime numbers are smaller than {n}?", _count_primes_below(n), code
    if family == "fibonacci":
        n, m = int(rng.integers(100, 5000)), [1000, 10**9 + 7, 998244353][int(rng.integers(3))]
        code = f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, (a + b) % {m}\nprint(a)"
        return (
            family,
            f"With F(0) = 0 and F(1) = 1, what is the Fibonacci number F({n}) modulo {m}?",
            _fibonacci_mod(n, m),
            code,
        )
    if family == "divisors":
        primes = [2, 3, 5, 7, 11, 13, 17, 19, 23]
        exponents = {p: int(rng.integers(0, 3)) for p in primes[: int(rng.integers(3, 7))]}
        n = int(np.prod([p**e for p, e in exponents.items()], dtype=object))
        answer = int(np.prod([e + 1 for e in exponents.values()]))
        code = f"n, count, d = {n}, 0, 1\nwhile d * d <= n:\n    if n % d == 0:\n        count += 1 if d * d == n else 2\n    d += 1\nprint(count)"
        return family, f"How many positive divisors does {n} have?", answer, code
    n = int(rng.integers(10_000, 10_000_000))
    code = f"n, steps = {n}, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)"
    return (
        family,
        f"Starting from {n}, how many steps of the Collatz map (n -> n/2 if even, 3n+1 if odd) reach 1?",
        _collatz_steps(n),
        code,
    )


class PythonToolEnv(ToolEnv):
    """Answer computational questions, writing and running Python as needed."""

    task_prefix = "py"
    instructions = "Answer the question exactly. Write Python (standard library only) and run it with the python tool; print what you need to see."

    def __init__(
        self,
        cpu_seconds: int = 2,
        wall_seconds: float = 5.0,
        memory_mb: int = 512,
        tool_parser: str = "hermes",
        max_turns: int = 4,
        isolation: str = "auto",
        sandbox_url: str | None = None,
        **common: Any,
    ) -> None:
        """``isolation``: ``auto``/``bwrap`` (the OS sandbox; ``SandboxUnavailable`` with the
        install step where this machine has none) or ``unsafe-local`` (no OS walls).
        ``sandbox_url``: run the code on a remote service with SandboxFusion's ``/run_code``
        instead (:mod:`forkgym.envs.sandbox.remote`); nothing then runs here."""
        self.sandbox_url = sandbox_url
        self.isolation = "remote" if sandbox_url else iso.resolve(isolation)
        if self.isolation == "bwrap":
            # nothing of this process (the task's reference answer, secrets) can be read
            # through /proc by a process of the same uid, even one that escaped
            iso.make_non_dumpable()
        self.limits = SandboxLimits(
            cpu_seconds=cpu_seconds, wall_seconds=wall_seconds, memory_mb=memory_mb
        )
        # what bounds a call here (a cgroup or rlimits alone, whose uid), in every info
        self.sandbox_info = containment(self.limits, self.isolation)
        config = {"cpu_seconds": cpu_seconds, "wall_seconds": wall_seconds, "memory_mb": memory_mb}
        super().__init__(config=config, tool_parser=tool_parser, max_turns=max_turns, **common)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "sandbox": dict(self.sandbox_info)}

    def respond(self, action: str) -> Turn:
        turn = super().respond(action)
        turn.info["sandbox"] = dict(self.sandbox_info)
        return turn

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        family, question, answer, code = _problem(rng)
        return Task(
            task_id=task_id,
            prompt=question,
            answer=str(answer),
            family=family,
            solution=f"The program prints {answer}, so the answer is $\\boxed{{{answer}}}$.",
            data={"gold_code": code, "sandbox_seed": int(rng.integers(2**31))},
        )

    @tool(
        "Run a Python program (standard library only) and return its stdout and stderr.",
        code="string",
    )
    def python(self, code: str) -> ToolResult:
        self.episode["runs"] = self.episode.get("runs", 0) + 1
        if self.sandbox_url is not None:
            result = run_remote(code, self.limits, self.sandbox_url)
        else:
            result = run_python(
                code, self.limits, seed=self.task.data["sandbox_seed"], isolation=self.isolation
            )
        return ToolResult(result.render(self.limits.shown_chars), result.status)

    def gold_action(self) -> str:
        if not self.episode.get("runs"):
            return self.format_call("python", code=self.task.data["gold_code"])
        return self.task.solution or f"$\\boxed{{{self.task.answer}}}$"
