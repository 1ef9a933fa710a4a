"""Per-call cost of the Python tool's OS sandbox (bubblewrap, seccomp, a uid and a cgroup per
call, a scratch tmpfs) beside the interpreter-only mode it replaced
(``isolation="unsafe-local"``: the same runner, rlimits and audit hook, no OS walls), in one
run. The first line says how this machine bounds a call (a cgroup, or rlimits alone).

Each mode runs ``--calls`` tool calls of two programs, interleaved so that a busy machine
slows both alike: a trivial one (``print(6 * 7)``, the fixed cost of a call) and a small
computation (a prime sieve to 50,000, what the env's gold programs do). The median and the
90th percentile of the wall time per call are printed, and the sandbox's extra cost: the
difference of the medians, and the median of each sandboxed call's difference from the
unsandboxed call just before it (paired: steadier when other work comes and goes).

``--load N`` keeps N extra processes spinning on the CPU for the whole run (a busy machine, on
purpose and reproducibly: ``--load 4`` on 2 cores is a load average of about 4 more than
the machine had).

Run: ``python benchmarks/sandbox_overhead.py [--calls 40] [--load 4]`` (needs bubblewrap:
``apt-get install bubblewrap``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import time

from forkgym.envs.sandbox import SandboxLimits, containment, run_python
from forkgym.envs.sandbox.isolation import available

PROGRAMS = {
    "print(6 * 7)": "print(6 * 7)",
    "sieve to 50,000": (
        "n = 50000\ns = [True] * n\ns[0] = s[1] = False\n"
        "for p in range(2, int(n ** 0.5) + 1):\n    if s[p]:\n"
        "        for q in range(p * p, n, p):\n            s[q] = False\nprint(sum(s))"
    ),
}
MODES = ("unsafe-local", "bwrap")


def _spin() -> None:
    # a session of its own, as a separate job would have: the kernel's autogroup would
    # otherwise lump the spinners with this process, and they would barely load the calls
    os.setsid()
    while True:
        pass


@contextlib.contextmanager
def _busy(processes: int):
    """``processes`` spinning processes for the length of the block."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for proc in spinners:
        proc.start()
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--load", type=int, default=0, help="extra spinning processes")
    args = parser.parse_args()
    problem = available()
    if problem is not None:
        print(f"sandbox_overhead: {problem}")
        return 0
    limits = SandboxLimits()
    info = containment(limits, "bwrap")
    print(f"sandbox: {info['accounting']}, cpus {info['cpus']}, uid {info['uid']}")
    times: dict[tuple[str, str], list[float]] = {(m, p): [] for m in MODES for p in PROGRAMS}
    for mode in MODES:  # warm-up: imports, page cache
        run_python("pass", limits, isolation=mode)
    with _busy(args.load):
        for _ in range(args.calls):
            for name, code in PROGRAMS.items():
                for mode in MODES:
                    t0 = time.perf_counter()
                    result = run_python(code, limits, isolation=mode)
                    times[(mode, name)].append(time.perf_counter() - t0)
                    if result.status != "tool_ok":
                        print(f"{mode} {name}: {result}")
                        return 1
        load = os.getloadavg()
    extra = f", {args.load} spinning processes beside it" if args.load else ""
    print(f"sandbox_overhead  {args.calls} calls per program and mode, interleaved{extra}")
    print(f"{'program':<18}{'mode':<14}{'median ms':>10}{'p90 ms':>9}")
    for name in PROGRAMS:
        medians = {}
        for mode in MODES:
            values = sorted(times[(mode, name)])
            medians[mode] = statistics.median(values) * 1000
            p90 = values[int(0.9 * (len(values) - 1))] * 1000
            print(f"{name:<18}{mode:<14}{medians[mode]:>10.1f}{p90:>9.1f}")
        extra = medians["bwrap"] - medians["unsafe-local"]
        # each bwrap call beside the unsafe call just before it: robust to load that changes
        pairs = zip(times[("bwrap", name)], times[("unsafe-local", name)], strict=True)
        paired = statistics.median(b - u for b, u in pairs) * 1000
        print(f"{'':<18}{'OS sandbox':<14}{extra:>+10.1f} ms per call ({paired:+.1f} paired)")
    print(f"load average {' '.join(f'{x:.2f}' for x in load)} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
