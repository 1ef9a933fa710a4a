"""Verification throughput: raw math-verify vs forkgym in-process vs forkgym's 2-worker pool.

Two fixed, seeded mixes of unique items:

* ``integer``: GSM8K-like, a few hundred characters of step-by-step arithmetic before a boxed
  integer (some with thousands separators, some wrong, a few with no box);
* ``math``: MATH-like, fractions, radicals, tuples, intervals, sets and polynomials, about
  half of them wrong.

Each (mix, method) runs in a fresh subprocess, so no method profits from sympy's or
math-verify's caches warmed by another; each warms up on a separate seeded set first, and
its timed section starts after a full garbage collection: with sympy imported the heap holds
some 220,000 objects, and a full collection that the warm-up left pending (about 0.1 s)
would otherwise land in one method's window or another's by chance (a quarter of the integer
mix's time). The collector stays on while timing. The verdict cache is off. Run: ``python benchmarks/verify_throughput.py [--quick] [--preempt-after S]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections import Counter

from lib.recipes import MIXES

METHODS = {
    "raw": "raw math-verify (1 process)",
    "inline": "forkgym in-process",
    "pool": "forkgym pool, 2 workers",
}
TARGETS = {("integer", "inline"): 20.0, ("integer", "pool"): 20.0, ("math", "pool"): 1.7}


def run_method(mix: str, method: str, n: int, seed: int, preempt_after: float = 0.0) -> dict:
    """Runs in a child process: warm up, then time one method on one mix."""
    items = MIXES[mix](n, seed)
    warm = MIXES[mix](max(8, n // 20), seed + 1_000_003)
    latencies: list[float] = []
    fast = 0
    if method == "raw":
        from math_verify import parse, verify

        def raw(ref: str, resp: str) -> bool:
            return verify(parse(f"${ref}$"), parse(resp))

        for ref, resp in warm:
            raw(ref, resp)
        gc.collect()
        start = time.perf_counter()
        verdicts = []
        for ref, resp in items:
            t = time.perf_counter()
            verdicts.append("correct" if raw(ref, resp) else "not")
            latencies.append((time.perf_counter() - t) * 1e3)
        elapsed = time.perf_counter() - start
    else:
        from forkgym.verifiers import MathVerifier

        verifier = MathVerifier(
            timeout=10.0,
            workers=0 if method == "inline" else 2,
            cache_size=0,
            preempt_after_s=preempt_after or None,
        )
        with verifier:
            verifier.verify_many(warm)
            gc.collect()
            start = time.perf_counter()
            outcomes = verifier.verify_many(items)
            elapsed = time.perf_counter() - start
        latencies = [o.latency_ms for o in outcomes]
        verdicts = ["correct" if o.is_correct else "not" for o in outcomes]
        fast = sum(o.details.get("path") == "fast" for o in outcomes)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "mix": mix,
        "method": method,
        "items": len(items),
        "seconds": elapsed,
        "per_s": len(items) / elapsed,
        "p50_ms": cuts[49],
        "p99_ms": cuts[98],
        "fast_share": fast / len(items),
        "verdicts": verdicts,
        "statuses": [o.status.value for o in outcomes] if method != "raw" else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller mixes (a smoke run)")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument(
        "--preempt-after",
        type=float,
        default=0.0,
        help="the pool's preemption slice, seconds (0: off); one caller never preempts itself",
    )
    parser.add_argument("--child", nargs=2, metavar=("MIX", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("-n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_method(*args.child, args.n, args.seed, args.preempt_after)))
        return 0

    sizes = {"integer": 400, "math": 60} if args.quick else {"integer": 5000, "math": 240}
    results = {}
    for mix, n in sizes.items():
        for method in METHODS:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    mix,
                    method,
                    "-n",
                    str(n),
                    "--seed",
                    str(args.seed),
                    "--preempt-after",
                    str(args.preempt_after),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[mix, method] = json.loads(out.strip().splitlines()[-1])

    print(f"verify_throughput  seed={args.seed}  (each row: a fresh process, verdict cache off)")
    header = f"{'mix':8} {'method':28} {'items':>6} {'verif/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'fast':>6} {'vs raw':>7}  agree"
    print(header)
    print("-" * len(header))
    failed = []
    for (mix, method), r in results.items():
        raw = results[mix, "raw"]
        speedup = r["per_s"] / raw["per_s"]
        agree = sum(a == b for a, b in zip(r["verdicts"], raw["verdicts"], strict=True))
        target = TARGETS.get((mix, method))
        mark = ""
        if target is not None:
            ok = speedup >= target
            mark = f"  target >= {target:g}x: {'PASS' if ok else 'FAIL'}"
            if not ok:
                failed.append((mix, method))
        print(
            f"{mix:8} {METHODS[method]:28} {r['items']:>6} {r['per_s']:>9,.1f} {r['p50_ms']:>8.2f} "
            f"{r['p99_ms']:>8.2f} {r['fast_share']:>6.0%} {speedup:>6.1f}x  {agree}/{r['items']}{mark}"
        )
    print(
        "agree: items whose correct/not-correct verdict equals raw math-verify's on the same item"
    )
    for (mix, method), r in results.items():
        if method == "raw":
            continue
        raw = results[mix, "raw"]["verdicts"]
        differ = Counter(
            f"{status} (raw: {verdict})"
            for status, mine, verdict in zip(r["statuses"], r["verdicts"], raw, strict=True)
            if mine != verdict
        )
        if differ:
            print(
                f"  {mix}/{method} disagreements: "
                + ", ".join(f"{k} x{n}" for k, n in differ.items())
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
