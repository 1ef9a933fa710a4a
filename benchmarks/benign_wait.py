"""How long a benign request waits while another client floods the service with pathological
items, with and without preemption (``forkgym serve --preempt-after``).

One ``forkgym serve --workers 2 --timeout 5`` per setting (verdict cache on, timeout memory
off). Client A posts 8 items that each run into the 5 s limit (huge factorials, power towers,
a 10^9-term sum), in one request and then in 8 concurrent requests of one item; 1 s later,
once A's items hold both workers, client B posts one symbolic item that the fast path cannot
decide (a new one each time, so it is never answered from the cache). Reported: B's wall time,
A's wall time, and the items preempted. Run: ``python benchmarks/benign_wait.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from forkgym.services.server import spawn

FLOOD = (
    r"\boxed{(10^{7})!}",
    r"\boxed{9^{9^{9^{9}}}}",
    r"\boxed{\sum_{k=1}^{10^{9}} k^{k}}",
    r"\boxed{7^{7^{7^{7}}}}",
)


_FRESH = itertools.count(1000)  # B's item: 2x+k, a new k each time


def preempted(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("forkgym_items_preempted "):
            return float(line.split()[1])
    return 0.0


def one_flood(url: str, requests: int, tag: str) -> dict[str, float]:
    """A's 8 items in ``requests`` concurrent requests, B's item 1 s later."""
    items = [{"reference": f"{tag}{n}", "response": FLOOD[n % 4]} for n in range(8)]
    statuses: list[str] = []

    def post(chunk: list[dict]) -> None:
        with httpx.Client(timeout=120) as client:
            reply = client.post(f"{url}/v1/verify/batch", json={"items": chunk})
        statuses.extend(o["status"] for o in reply.json()["outcomes"])

    before = preempted(url)
    flood = [threading.Thread(target=post, args=(items[i::requests],)) for i in range(requests)]
    start = time.perf_counter()
    for thread in flood:
        thread.start()
    time.sleep(1.0)
    k = next(_FRESH)
    with httpx.Client(timeout=60) as client:
        t = time.perf_counter()
        answer = client.post(
            f"{url}/v1/verify", json={"reference": f"2x+{k}", "response": rf"\boxed{{{k}+2x}}"}
        ).json()
        benign = time.perf_counter() - t
    for thread in flood:
        thread.join()
    assert answer["status"] == "correct" and statuses == ["timeout"] * 8, (answer, statuses)
    return {
        "benign_s": benign,
        "flood_s": time.perf_counter() - start,
        "preempted": preempted(url) - before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="floods of each shape per setting")
    parser.add_argument("--slices", default="0,0.5", help="--preempt-after values (0: off)")
    args = parser.parse_args()
    rows = []
    for slice_s in args.slices.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            proc, url = spawn(
                f"sqlite:///{Path(tmp) / 'wait.db'}",
                "--workers", "2", "--timeout", "5", "--timeout-memory", "0",
                "--preempt-after", slice_s,
            )  # fmt: skip
            try:
                for requests in (1, 8):
                    runs = [
                        one_flood(url, requests, f"s{slice_s}r{requests}n{i}-")
                        for i in range(args.repeat)
                    ]
                    median = statistics.median(r["benign_s"] for r in runs)
                    rows.append(
                        {
                            "preempt_after": float(slice_s),
                            "requests": requests,
                            "benign_s": [round(r["benign_s"], 2) for r in runs],
                            "benign_median_s": round(median, 2),
                            "flood_s": [round(r["flood_s"], 1) for r in runs],
                            "preempted": [int(r["preempted"]) for r in runs],
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
