"""Verifier service throughput over HTTP with SQLite persistence, beside in-process grading.

One run, the seeded mixes of ``verify_throughput.py`` (integer answers; MATH-like answers):

* in-process: ``MathVerifier(workers=2).verify_many`` (the pool the service uses), no HTTP,
  nothing recorded;
* HTTP batches of 64: 4 client threads, each posting batches with the forkgym client;
* HTTP singles, 16 concurrent clients: 16 threads, each with a ``VerifierClient`` (httpx);
* HTTP singles, 16 connections, minimal client: raw HTTP/1.1 on 16 keep-alive sockets, so the
  figure is the service's capacity rather than the client library's;
* SQLite alone: the same items' rows inserted with the bare ``sqlite3`` module into the
  service's schema, 64 per transaction: the persistence ceiling on this disk, no HTTP, no
  grading, no SQLAlchemy.

Beside each HTTP figure: the CPU the server process spent per item, and the CPU the client
process spent per item (both from the kernel's accounting), since on this 2-core machine the
clients compete with the service for the same cores.

Every HTTP item is graded, committed to SQLite (WAL) and acknowledged before it counts.
Run: ``python benchmarks/service_throughput.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

from lib.recipes import integer_mix, math_mix

from forkgym.services import VerifierClient
from forkgym.services.server import spawn
from forkgym.store import upgrade
from forkgym.verifiers import MathVerifier

SEED = 20261202


def start_server(
    db: Path | str, workers: int = 2, processes: int = 1
) -> tuple[subprocess.Popen, str]:
    """``forkgym serve`` on a free port; ``db`` is a SQLite file or a database URL."""
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    args = ("--workers", str(workers), "--timeout", "10", "--processes", str(processes))
    return spawn(url, *args)


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU of a process (this one when ``pid`` is None)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(server_pid: int, n: int, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``run()``'s figures plus server and client CPU per item."""
    server, client = cpu_seconds(server_pid), cpu_seconds()
    result = run()
    result["server_us"] = 1e6 * (cpu_seconds(server_pid) - server) / n
    result["client_us"] = 1e6 * (cpu_seconds() - client) / n
    return result


def sqlite_alone(items: list[tuple[str, str]], db: Path, batch: int = 64) -> dict[str, float]:
    """Rows like the service's, inserted with bare sqlite3 into the migrated schema."""
    upgrade(f"sqlite:///{db}")
    verifier = MathVerifier(workers=0, cache_size=0)
    rows = []
    for reference, response in items:
        outcome = verifier.verify_quick(reference, response) or verifier.verify(reference, response)
        key = uuid.uuid4().hex
        rows.append(
            (key, key, uuid.uuid4().hex, reference, response,
             hashlib.sha256(response.encode()).hexdigest(), len(response), outcome.extracted,
             outcome.status.value, outcome.reward, outcome.verifier, outcome.verifier_version,
             outcome.latency_ms, json.dumps(outcome.details), "2026-12-03 00:00:00.000000")
        )  # fmt: skip
    columns = (
        "id, idempotency_key, request_id, reference, response, response_sha256, "
        "response_chars, extracted, status, reward, verifier, verifier_version, latency_ms, "
        "details, created_at"
    )
    sql = (
        f"INSERT INTO verification_outcomes ({columns}) VALUES ({', '.join('?' * 15)}) "
        "ON CONFLICT DO NOTHING"
    )
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        con.execute("BEGIN IMMEDIATE")
        con.executemany(sql, rows[i : i + batch])
        con.execute("COMMIT")
    elapsed = time.perf_counter() - start
    con.close()
    return {"per_s": len(rows) / elapsed, "p50": float("nan"), "p99": float("nan")}


def pct(values: list[float], q: int) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def in_process(items: list[tuple[str, str]]) -> dict[str, float]:
    with MathVerifier(workers=2, timeout=10, cache_size=0) as verifier:
        start = time.perf_counter()
        outcomes = verifier.verify_many(items)
        elapsed = time.perf_counter() - start
    lat = [o.latency_ms for o in outcomes]
    return {"per_s": len(items) / elapsed, "p50": pct(lat, 50), "p99": pct(lat, 99)}


def threaded(
    url: str | list[str], items: list[tuple[str, str]], threads: int, batch: int
) -> dict[str, float]:
    """``threads`` clients; each sends its share, ``batch`` items per request (1 = singles);
    several URLs: each client spreads its requests over them."""
    latencies: list[float] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        mine = items[k::threads]
        local = []
        with VerifierClient(url, batch_size=batch, retries=2) as client:
            for i in range(0, len(mine), batch):
                t = time.perf_counter()
                if batch == 1:
                    outcome = client.verify(*mine[i])
                    assert not outcome.is_infrastructure or outcome.status.value == "timeout", (
                        outcome
                    )
                else:
                    client.verify_many(mine[i : i + batch])
                local.append((time.perf_counter() - t) * 1e3)
        with lock:
            latencies.extend(local)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    return {"per_s": len(items) / elapsed, "p50": pct(latencies, 50), "p99": pct(latencies, 99)}


def raw_singles(url: str, items: list[tuple[str, str]], connections: int = 16) -> dict[str, float]:
    """16 keep-alive sockets speaking plain HTTP/1.1: the service's own capacity."""
    parsed = urlparse(url)
    latencies: list[float] = []
    cursor = iter(items)

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
        for reference, response in cursor:
            body = json.dumps(
                {"reference": reference, "response": response, "idempotency_key": uuid.uuid4().hex}
            ).encode()
            head = f"POST /v1/verify HTTP/1.1\r\nHost: {parsed.netloc}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            t = time.perf_counter()
            writer.write(head.encode() + body)
            await writer.drain()
            headers = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(h.split(b":")[1])
                for h in headers.split(b"\r\n")
                if h.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            if not headers.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(headers.decode())
            latencies.append((time.perf_counter() - t) * 1e3)
        writer.close()

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(connection() for _ in range(connections)))
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    return {"per_s": len(items) / elapsed, "p50": pct(latencies, 50), "p99": pct(latencies, 99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = {"integer": 2000, "math": 64} if args.quick else {"integer": 8000, "math": 240}
    results: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mix, make in (("integer", integer_mix), ("math", math_mix)):
            n = sizes[mix]
            results[mix, "in-process pool (2 workers)"] = in_process(make(n, SEED))
            proc, url = start_server(Path(tmp) / f"{mix}.db")
            try:
                # distinct seeds: every HTTP run records new items, never replays earlier ones
                batches, singles, raw = make(n, SEED + 1), make(n, SEED + 2), make(n, SEED + 3)
                results[mix, "HTTP batches of 64, 4 clients"] = measured(
                    proc.pid, n, partial(threaded, url, batches, threads=4, batch=64)
                )
                results[mix, "HTTP singles, 16 forkgym clients"] = measured(
                    proc.pid, n, partial(threaded, url, singles, threads=16, batch=1)
                )
                results[mix, "HTTP singles, 16 raw connections"] = measured(
                    proc.pid, n, partial(raw_singles, url, raw)
                )
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            results[mix, "SQLite alone (sqlite3, 64/txn)"] = sqlite_alone(
                make(n, SEED + 4), Path(tmp) / f"{mix}-alone.db"
            )

    print(
        f"service_throughput  seed={SEED}  integer items={sizes['integer']}  MATH-like items={sizes['math']}  (2-worker pool, SQLite WAL)"
    )
    header = (
        f"{'mix':8} {'path':36} {'verif/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'server us/it':>12} {'client us/it':>12} {'vs in-process':>14}"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for (mix, path), r in results.items():
        base = results[mix, "in-process pool (2 workers)"]["per_s"]
        ratio = r["per_s"] / base
        mark = ""
        if mix == "math" and path.startswith("HTTP batches"):
            mark = f"  target >= 70%: {'PASS' if ratio >= 0.7 else 'FAIL'}"
            failed |= ratio < 0.7
        if mix == "integer" and "singles" in path:
            ok = r["per_s"] >= 500
            mark = f"  target >= 500/s: {'PASS' if ok else 'FAIL'}"
            failed |= not ok and "raw" in path
        cpu = (
            f"{r.get('server_us', float('nan')):>12,.0f} {r.get('client_us', float('nan')):>12,.0f}"
        )
        print(
            f"{mix:8} {path:36} {r['per_s']:>9,.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {cpu} {ratio:>13.0%}{mark}"
        )
    print("p50/p99: per request (a batch of 64 counts once); in-process: per item")
    print("server/client us/it: CPU microseconds per item in the server / benchmark process")
    print(
        f"cpu count: {os.cpu_count()}; the clients run on the same {os.cpu_count()} cores as the service"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
