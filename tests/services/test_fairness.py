"""One client cannot monopolise the service: a per-request budget, grading that stops when the
client leaves, and timeouts answered from memory. Real servers over real sockets.

The bounds are generous on purpose (a loaded CI machine must pass): each separates "stopped"
from "ran to the end" by several seconds, never by milliseconds.
"""

from __future__ import annotations

import sqlite3
import time

import httpx
import pytest

from tests.services.conftest import start_server

TOWER = {"reference": "3", "response": r"\boxed{9^{9^{9^{9}}}}"}  # a power tower: times out
SYMBOLIC = {"reference": "2x+1", "response": r"\boxed{1+2x}"}  # the fast path cannot decide it
LIMIT = 3.0


@pytest.fixture
def slow_server(tmp_path):
    srv = start_server(
        tmp_path / "fair.db", "--workers", "1", "--timeout", str(LIMIT),
        "--request-budget", "4", "--timeout-memory", "600",
    )  # fmt: skip
    yield srv
    srv.stop()


@pytest.fixture
def unbudgeted_server(tmp_path):
    """No request budget: only the disconnect can stop a batch early."""
    srv = start_server(
        tmp_path / "gone.db", "--workers", "1", "--timeout", str(LIMIT), "--request-budget", "0"
    )
    yield srv
    srv.stop()


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


@pytest.mark.slow
def test_a_request_stops_at_its_budget_and_says_so(slow_server):
    items = [{**TOWER, "reference": str(n)} for n in (3, 4, 5, 6)]  # four distinct timeouts
    response, seconds = _timed(
        lambda: httpx.post(f"{slow_server.url}/v1/verify/batch", json={"items": items}, timeout=120)
    )
    outcomes = response.json()["outcomes"]
    assert [o["status"] for o in outcomes] == ["timeout"] * 4
    reasons = [o["details"]["reason"] for o in outcomes]
    assert "request_budget" in reasons  # 4 limits of 3 s on one worker do not fit in 4 s
    assert seconds < 4 * LIMIT  # it did not run all four to their limits


@pytest.mark.slow
def test_a_repeated_timeout_is_answered_from_memory(slow_server):
    url = f"{slow_server.url}/v1/verify"
    first = httpx.post(url, json={**TOWER, "reference": "7"}, timeout=60).json()
    again, seconds = _timed(lambda: httpx.post(url, json={**TOWER, "reference": "7"}, timeout=60))
    assert first["status"] == again.json()["status"] == "timeout"
    assert again.json()["details"]["path"] == "timeout_memory"
    assert seconds < LIMIT  # answered without running the item again


@pytest.mark.slow
def test_a_client_that_leaves_frees_the_workers_and_records_nothing(unbudgeted_server):
    slow_server = unbudgeted_server
    items = [{**TOWER, "reference": str(n), "id": f"gone-{n}"} for n in (11, 12, 13, 14)]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{slow_server.url}/v1/verify/batch", json={"items": items}, timeout=0.5)
    # another client's symbolic request is served soon after, not after four limits
    response, seconds = _timed(
        lambda: httpx.post(f"{slow_server.url}/v1/verify", json=SYMBOLIC, timeout=60)
    )
    assert response.json()["status"] == "correct"
    assert seconds < 2 * LIMIT  # the gone client's batch would hold the worker for 4 limits
    time.sleep(0.5)
    with sqlite3.connect(slow_server.db) as conn:
        rows = conn.execute(
            "select count(*) from verification_outcomes where id like 'gone-%'"
        ).fetchone()
    assert rows == (0,)  # nothing recorded: a retry grades again


@pytest.mark.slow
def test_a_batch_of_slow_items_does_not_queue_ahead_of_another_client(unbudgeted_server):
    """One worker, a client's batch of four items that each take the full limit: another
    client's request starts as soon as the worker frees, not after the batch (fair slots)."""
    import threading

    url = unbudgeted_server.url
    items = [{**TOWER, "reference": str(n)} for n in (21, 22, 23, 24)]
    batch = threading.Thread(
        target=lambda: httpx.post(f"{url}/v1/verify/batch", json={"items": items}, timeout=120)
    )
    batch.start()
    time.sleep(0.5)  # the batch holds the worker
    response, seconds = _timed(lambda: httpx.post(f"{url}/v1/verify", json=SYMBOLIC, timeout=60))
    assert response.json()["status"] == "correct"
    # at most the rest of one item's limit (~2.5 s), then its own grading; first come, first
    # served would also wait for the batch's next item (over 5.5 s)
    assert seconds < LIMIT + 1.5
    batch.join()
