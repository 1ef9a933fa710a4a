"""Two verifier replicas on one real PostgreSQL database (a private cluster the test starts)."""

import concurrent.futures

import httpx
import pytest
import sqlalchemy as sa

from .conftest import start_server

pytestmark = pytest.mark.slow


def test_two_replicas_start_together_and_record_each_key_once(postgres_url):
    """Both replicas run the migrations at the same moment (one waits on the other's lock) and
    come up; a request sent to one and retried on the other is recorded once."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        starts = [
            pool.submit(start_server, postgres_url, "--workers", "1", "--timeout", "2")
            for _ in range(2)
        ]
        servers = [s.result() for s in starts]
    try:
        ids = {}
        for i in range(40):
            body = {"reference": str(i), "response": rf"\boxed{{{i}}}", "idempotency_key": f"k{i}"}
            first, second = servers[i % 2], servers[(i + 1) % 2]
            a = httpx.post(f"{first.url}/v1/verify", json=body, timeout=30).json()
            b = httpx.post(f"{second.url}/v1/verify", json=body, timeout=30).json()
            assert a["id"] == b["id"] and b["replayed"] and a["status"] == "correct"
            ids[f"k{i}"] = a["id"]
    finally:
        for server in servers:
            server.stop()
    engine = sa.create_engine(postgres_url)
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT idempotency_key, count(*) FROM verification_outcomes GROUP BY 1")
        ).all()
    engine.dispose()
    assert dict(rows) == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("processes", [1, 2])
def test_sixteen_clients_over_two_replicas_survive_a_kill_minus_nine(postgres_url, processes):
    """16 clients x 500 requests spread over two replicas by the client, which retries on the
    other replica; one replica is killed (-9) a third of the way in. Every request is answered,
    every acknowledged outcome is recorded exactly once, and nothing else is recorded. With
    two uvicorn processes per replica, the kill hits the replica's parent: its processes go
    with it."""
    import signal
    import threading

    from forkgym.services import VerifierClient

    args = ("--workers", "1", "--processes", str(processes))
    servers = [start_server(postgres_url, *args) for _ in range(2)]
    acknowledged: dict[str, str] = {}  # idempotency key -> outcome id
    failures: list[str] = []
    lock = threading.Lock()
    third = threading.Event()
    attempts: list[int] = []

    def client_thread(k: int) -> None:
        urls = [s.url for s in servers]
        with VerifierClient(urls, retries=6, backoff=0.05, timeout=30) as client:
            for i in range(500):
                n = 1000 * k + i
                key = f"c{k}-{i}"
                outcome = client.verify(str(n), rf"so \boxed{{{n}}}", id=key)
                with lock:
                    if outcome.status.value != "correct":
                        failures.append(f"{key}: {outcome.status.value} {outcome.details}")
                    else:
                        acknowledged[key] = outcome.details["id"]
                    if len(acknowledged) >= 16 * 500 // 3:
                        third.set()
        with lock:
            attempts.append(client.attempts)

    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    assert third.wait(300), "the load never got going"
    servers[0].proc.send_signal(signal.SIGKILL)  # no shutdown, no flush
    servers[0].proc.wait()
    for t in threads:
        t.join()
    servers[1].stop()
    assert not failures, failures[:5]
    assert len(acknowledged) == 16 * 500
    assert sum(attempts) > 16 * 500  # requests to the dead replica failed over to the other
    engine = sa.create_engine(postgres_url)
    with engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT id FROM verification_outcomes")).all()
    engine.dispose()
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == len(acknowledged)  # exactly once each
    assert set(ids) == set(acknowledged.values())  # nothing unacknowledged either
