"""One client cannot monopolise the service: a per-request budget, grading that stops when the
client leaves, timeouts answered from memory, fair shares of the workers, and long items that
give way to a waiting caller. Real servers over real sockets.

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


# -- preemption: a flood of pathological items does not hold a benign request for a limit ------

FLOOD = (  # each runs into the 5 s limit
    r"\boxed{(10^{7})!}",
    r"\boxed{9^{9^{9^{9}}}}",
    r"\boxed{\sum_{k=1}^{10^{9}} k^{k}}",
    r"\boxed{7^{7^{7^{7}}}}",
)
FLOOD_LIMIT = 5.0


@pytest.fixture(scope="module")
def flooded_server(tmp_path_factory):
    """Two workers, a 5 s limit and the default --preempt-after (0.5 s)."""
    srv = start_server(
        tmp_path_factory.mktemp("flood") / "flood.db",
        "--workers", "2", "--timeout", str(FLOOD_LIMIT), "--timeout-memory", "0",
    )  # fmt: skip
    yield srv
    srv.stop()


def _preempted(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("forkgym_items_preempted "):
            return float(line.split()[1])
    raise AssertionError("no forkgym_items_preempted metric")


def _benign_wait_during_flood(server, tag: str, requests: int, run_id: str | None = None):
    """Client A posts 8 pathological items (in ``requests`` concurrent requests); once they
    hold both workers past the slice, client B posts one symbolic item. Returns B's wall
    time, A's outcomes and how many items were preempted meanwhile."""
    import threading

    url = server.url
    items = [
        {"reference": str(n), "response": FLOOD[n % 4], "id": f"{tag}-{n}", "run_id": run_id}
        for n in range(8)
    ]
    outcomes: list[dict] = []
    before = _preempted(url)

    def post(chunk: list[dict]) -> None:
        with httpx.Client(timeout=120) as client_a:
            reply = client_a.post(f"{url}/v1/verify/batch", json={"items": chunk})
        outcomes.extend(reply.json()["outcomes"])

    chunks = [items[i::requests] for i in range(requests)]
    flood = [threading.Thread(target=post, args=(chunk,)) for chunk in chunks]
    for thread in flood:
        thread.start()
    time.sleep(1.0)  # A's items hold both workers and have run past the slice
    k = sum(map(ord, tag))  # a symbolic item of its own: never answered from the cache
    simple = {"reference": f"2x+{k}", "response": rf"\boxed{{{k}+2x}}"}
    with httpx.Client(timeout=60) as client_b:
        response, seconds = _timed(lambda: client_b.post(f"{url}/v1/verify", json=simple))
    assert response.json()["status"] == "correct"
    assert response.json()["details"]["path"] == "math_verify"  # graded in the pool
    for thread in flood:
        thread.join()
    print(f"\nbenign wait during a flood ({requests} request(s)): {seconds:.2f} s")
    return seconds, outcomes, _preempted(url) - before


def _every_item_once_as_a_timeout(server, tag: str, outcomes: list[dict]) -> None:
    """The flood's items all come back as what they are (the limit ran out: ``timeout``,
    preempted or not), and each is recorded once."""
    assert sorted(o["id"] for o in outcomes) == sorted(f"{tag}-{n}" for n in range(8))
    assert {(o["status"], o["details"]["reason"]) for o in outcomes} == {("timeout", "time_limit")}
    with sqlite3.connect(server.db) as conn:
        rows = conn.execute(
            "select count(*), count(distinct id) from verification_outcomes where id like ?",
            (f"{tag}-%",),
        ).fetchone()
    assert rows == (8, 8)


@pytest.mark.slow
def test_a_flood_in_one_request_does_not_hold_a_benign_request_for_a_limit(flooded_server):
    seconds, outcomes, preempted = _benign_wait_during_flood(flooded_server, "one", 1)
    # preempted: stopping an item and the symbolic grading (0.13-0.29 s on an idle machine);
    # without preemption, the rest of the 5 s limit of the item B waits for (about 4 s)
    assert seconds < FLOOD_LIMIT / 2
    assert preempted == 1
    _every_item_once_as_a_timeout(flooded_server, "one", outcomes)


@pytest.mark.slow
def test_a_flood_split_into_many_requests_does_not_either(flooded_server):
    """Eight concurrent requests of one item each: eight callers, so they may preempt items
    that were running before they came (each item at most once), but the last worker never
    holds a rerun, so B still finds one to take over."""
    seconds, outcomes, preempted = _benign_wait_during_flood(flooded_server, "split", 8)
    assert seconds < FLOOD_LIMIT / 2
    assert 1 <= preempted <= 8
    _every_item_once_as_a_timeout(flooded_server, "split", outcomes)


@pytest.mark.slow
def test_the_requests_of_one_run_are_one_caller(flooded_server):
    """A run that names itself (run_id, as the clients send it) is one caller however many
    requests it sends at once: they never preempt each other, and B takes one worker."""
    seconds, outcomes, preempted = _benign_wait_during_flood(flooded_server, "labelled", 4, "flood")
    assert seconds < FLOOD_LIMIT / 2
    assert preempted == 1  # B's, and no other
    _every_item_once_as_a_timeout(flooded_server, "labelled", outcomes)
