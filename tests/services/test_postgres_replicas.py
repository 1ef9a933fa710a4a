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
