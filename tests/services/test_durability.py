"""Nothing lost, nothing doubled: concurrent load, retries, and kill -9 in the middle of it."""

import signal
import sqlite3
import threading
import time

import httpx
import pytest

from forkgym.services import VerifierClient

from .conftest import start_server


def recorded(db) -> tuple[list[str], int]:
    con = sqlite3.connect(db)
    try:
        ids = [r[0] for r in con.execute("select id from verification_outcomes")]
        distinct = con.execute("select count(distinct id) from verification_outcomes").fetchone()[0]
        return ids, distinct
    finally:
        con.close()


@pytest.mark.slow
def test_sixteen_clients_times_five_hundred_requests_lose_and_double_nothing(tmp_path):
    server = start_server(tmp_path / "load.db", "--workers", "2")
    acknowledged: set[str] = set()
    failures: list[str] = []
    lock = threading.Lock()

    def client_thread(k: int) -> None:
        mine: set[str] = set()
        with (
            VerifierClient(server.url, retries=5, backoff=0.05) as client,
            httpx.Client(base_url=server.url) as raw,
        ):
            for i in range(500):
                n = 1000 * k + i
                if i % 5 == 0:  # a batch of four
                    outcomes = client.verify_many(
                        [(str(n + j), rf"\boxed{{{n + j}}}") for j in range(4)]
                    )
                elif i % 25 == 1:  # a retried request: the same key sent twice, answered twice
                    body = {
                        "reference": str(n),
                        "response": rf"\boxed{{{n}}}",
                        "idempotency_key": f"retry-{k}-{i}",
                    }
                    first, second = (
                        raw.post("/v1/verify", json=body).json(),
                        raw.post("/v1/verify", json=body).json(),
                    )
                    if first["id"] != second["id"] or not second["replayed"]:
                        failures.append(f"retry {k}-{i} recorded twice")
                    mine.add(first["id"])
                    continue
                else:
                    outcomes = [client.verify(str(n), rf"so \boxed{{{n}}}")]
                for outcome in outcomes:
                    if outcome.status.value != "correct":
                        failures.append(f"{k}-{i}: {outcome}")
                    else:
                        mine.add(outcome.details["id"])
        with lock:
            acknowledged.update(mine)

    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(16)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    server.stop()
    assert not failures, failures[:5]
    ids, distinct = recorded(server.db)
    assert len(acknowledged) == 16 * (100 * 4 + 380 + 20)  # batches, singles, retried singles
    assert len(ids) == distinct == len(acknowledged)  # exactly once each
    assert set(ids) == acknowledged  # and nothing that was not acknowledged
    print(f"16 x 500 requests ({len(ids)} outcomes) in {elapsed:.1f} s")


@pytest.mark.slow
def test_kill_minus_nine_under_load_keeps_every_acknowledged_outcome(tmp_path):
    db = tmp_path / "crash.db"
    server = start_server(db, "--workers", "2")
    attempted: dict[str, dict] = {}
    acknowledged: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def pump(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for i in range(100_000):
                if stop.is_set():
                    return
                items = [
                    {
                        "reference": str(j),
                        "response": rf"\boxed{{{j}}}",
                        "idempotency_key": f"c{k}-{i}-{j}",
                    }
                    for j in range(1 if i % 3 else 8)
                ]
                with lock:
                    attempted.update({item["idempotency_key"]: item for item in items})
                try:
                    if len(items) == 1:
                        reply = http.post("/v1/verify", json=items[0])
                        records = [reply.json()] if reply.status_code == 200 else []
                    else:
                        reply = http.post("/v1/verify/batch", json={"items": items})
                        records = reply.json()["outcomes"] if reply.status_code == 200 else []
                except httpx.TransportError:
                    return  # the server is gone
                with lock:
                    acknowledged.update(r["idempotency_key"] for r in records)

    threads = [threading.Thread(target=pump, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    time.sleep(4.0)
    server.proc.send_signal(signal.SIGKILL)  # no shutdown, no flush: the process just dies
    server.proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acknowledged) > 200, "the load never got going"

    restarted = start_server(db, "--workers", "2")
    try:
        con = sqlite3.connect(db)
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        keys = {r[0] for r in con.execute("select idempotency_key from verification_outcomes")}
        con.close()
        assert acknowledged <= keys  # every acknowledged outcome survived
        # Clients retry everything they were unsure of (and more): nothing doubles.
        with httpx.Client(base_url=restarted.url, timeout=30) as http:
            items = list(attempted.values())
            for chunk in range(0, len(items), 256):
                reply = http.post("/v1/verify/batch", json={"items": items[chunk : chunk + 256]})
                assert reply.status_code == 200
                replayed = [r["replayed"] for r in reply.json()["outcomes"]]
                batch_keys = [item["idempotency_key"] for item in items[chunk : chunk + 256]]
                assert all(
                    rep for rep, key in zip(replayed, batch_keys, strict=True) if key in keys
                )
        ids, distinct = recorded(db)
        assert len(ids) == distinct == len(attempted)
    finally:
        restarted.stop()
