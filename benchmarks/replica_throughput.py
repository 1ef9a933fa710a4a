"""Verifier service throughput with replicas on PostgreSQL, beside one replica on SQLite.

One run, the seeded integer mix of ``verify_throughput.py`` (answers the exact fast path
decides, so the figures are the HTTP + database path, not sympy), for each of:

* one ``forkgym serve`` on SQLite (WAL), the single-machine default;
* one ``forkgym serve`` on PostgreSQL;
* two ``forkgym serve`` replicas on the same PostgreSQL database, the client spreading its
  requests over both (``VerifierClient([url_a, url_b])``);
* one replica with two uvicorn processes on one port (``--processes 2``) on PostgreSQL.

Each with 16 concurrent forkgym clients sending single items, and 4 clients sending batches
of 64. PostgreSQL is a private server started in a temporary folder
(``forkgym.store.local_postgres``, default settings: fsync on, synchronous commit). Every item
is graded, committed and acknowledged before it counts. On a 2-core machine the clients, the
replicas and PostgreSQL share the same cores: a second replica can only help where one
replica's event loop, not the CPU, is the limit.

Run: ``python benchmarks/replica_throughput.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa
from lib.recipes import integer_mix
from service_throughput import SEED, start_server, threaded

from forkgym.store.local_postgres import pg_bin, private_cluster


def fresh_database(admin_url: str, name: str) -> str:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def run_setup(
    dbs: list[Path | str], n: int, seed: int, processes: int = 1
) -> dict[str, dict[str, float]]:
    """Start one replica per entry of ``dbs``, measure singles then batches, stop them."""
    servers = [start_server(db, workers=1, processes=processes) for db in dbs]
    urls = [url for _, url in servers]
    try:
        return {
            "singles": threaded(urls, integer_mix(n, seed), threads=16, batch=1),
            "batches": threaded(urls, integer_mix(n, seed + 1), threads=4, batch=64),
        }
    finally:
        for proc, _ in servers:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if pg_bin() is None:
        print("replica_throughput: PostgreSQL server binaries not installed", file=sys.stderr)
        return 1
    n = 1000 if args.quick else 4000
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, private_cluster() as admin:
        # distinct seeds: every setup records new items, never replays another's
        results["1 replica, SQLite"] = run_setup([Path(tmp) / "one.db"], n, SEED + 10)
        one = fresh_database(admin, "one_replica")
        results["1 replica, PostgreSQL"] = run_setup([one], n, SEED + 20)
        two = fresh_database(admin, "two_replicas")
        results["2 replicas, PostgreSQL"] = run_setup([two, two], n, SEED + 30)
        forked = fresh_database(admin, "two_processes")
        results["1 x 2 processes, PG"] = run_setup([forked], n, SEED + 40, processes=2)

    print(f"replica_throughput  seed={SEED}  integer items={n} per run  (1 grading worker each)")
    header = (
        f"{'setup':24} {'load':28} {'verif/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs SQLite':>10}"
    )
    print(header)
    print("-" * len(header))
    loads = {"singles": "singles, 16 clients", "batches": "batches of 64, 4 clients"}
    for setup, by_load in results.items():
        for load, r in by_load.items():
            base = results["1 replica, SQLite"][load]["per_s"]
            print(
                f"{setup:24} {loads[load]:28} {r['per_s']:>9,.0f} {r['p50']:>8.2f} "
                f"{r['p99']:>8.2f} {r['per_s'] / base:>9.0%}"
            )
    print("p50/p99: per request (a batch of 64 counts once)")
    print(f"cpu count: {os.cpu_count()}; clients, replicas and PostgreSQL share these cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
