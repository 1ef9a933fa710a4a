"""The verifier service over real sockets, with the real clients."""

import asyncio
import json
import sqlite3

import gymnasium as gym
import httpx
import pytest

import forkgym.envs  # noqa: F401
from forkgym.services import AsyncVerifierClient, VerifierClient
from forkgym.verifiers import Status

from .conftest import start_server


def rows(server, where="1=1"):
    con = sqlite3.connect(server.db)
    try:
        return con.execute(
            f"select id, idempotency_key, status, reward from verification_outcomes where {where}"
        ).fetchall()
    finally:
        con.close()


def metric(server, name):
    text = httpx.get(f"{server.url}/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


def test_health_and_openapi(server):
    health = httpx.get(f"{server.url}/healthz").json()
    assert health["status"] == "ok" and health["verifier_version"].startswith("forkgym-")
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert {
        "/v1/verify",
        "/v1/verify/batch",
        "/v1/outcomes/{outcome_id}",
        "/v1/outcomes",
        "/v1/stats",
        "/healthz",
        "/metrics",
    } <= set(spec["paths"])
    request = spec["components"]["schemas"]["VerifyRequest"]["properties"]
    assert (
        request["response"]["maxLength"] == 262_144
        and "reference" in spec["components"]["schemas"]["VerifyRequest"]["required"]
    )


def test_statuses_round_trip_and_are_recorded(server):
    with VerifierClient(server.url) as client:
        cases = {
            "correct": ("1/2", r"\boxed{0.5}"),
            "incorrect": ("42", r"\boxed{41}"),
            "invalid": ("7", "no box at all"),
            "timeout": ("3", r"\boxed{9^{9^{9^{9}}}}"),
        }
        for expected, (reference, response) in cases.items():
            outcome = client.verify(reference, response, task_id=f"task-{expected}")
            assert outcome.status.value == expected
            assert (outcome.reward is None) == (expected == "timeout")
            record = client.get(outcome.details["id"])
            assert record["status"] == expected and record["task_id"] == f"task-{expected}"
        assert (rows(server, f"id = '{outcome.details['id']}'")[0][2:]) == ("timeout", None)


def test_batch_keeps_order_and_lists_page(server):
    with VerifierClient(server.url, run_id="run-batch", batch_size=7) as client:
        pairs = [(str(i), rf"\boxed{{{i if i % 3 else i + 1}}}") for i in range(30)]
        outcomes = client.verify_many(pairs)
    assert [o.status for o in outcomes] == [
        Status.INCORRECT if i % 3 == 0 else Status.CORRECT for i in range(30)
    ]
    seen, after = [], 0
    while after is not None:
        page = httpx.get(
            f"{server.url}/v1/outcomes", params={"run_id": "run-batch", "after": after, "limit": 8}
        ).json()
        seen += [item["id"] for item in page["items"]]
        after = page["next_after"]
    assert seen == [o.details["id"] for o in outcomes]
    wrong = httpx.get(
        f"{server.url}/v1/outcomes", params={"run_id": "run-batch", "status": "incorrect"}
    ).json()
    assert len(wrong["items"]) == 10
    stats = httpx.get(f"{server.url}/v1/stats", params={"run_id": "run-batch"}).json()
    assert stats["counts"] == {"correct": 20, "incorrect": 10} and stats["total"] == 30
    assert stats["latency_ms"]["p50"] is not None


def test_idempotent_retries_return_the_recorded_outcome_without_regrading(server):
    body = {"reference": "x^2-1", "response": r"\boxed{(x-1)(x+1)}"}
    first = httpx.post(
        f"{server.url}/v1/verify", json=body, headers={"Idempotency-Key": "retry-1"}
    ).json()
    graded = metric(server, "forkgym_items_graded")
    again = httpx.post(
        f"{server.url}/v1/verify", json=body, headers={"Idempotency-Key": "retry-1"}
    ).json()
    by_field = httpx.post(
        f"{server.url}/v1/verify", json={**body, "idempotency_key": "retry-1"}
    ).json()
    assert first["id"] == again["id"] == by_field["id"] == "retry-1"
    assert (first["replayed"], again["replayed"], by_field["replayed"]) == (False, True, True)
    assert again["created_at"] == first["created_at"] and again["latency_ms"] == first["latency_ms"]
    assert metric(server, "forkgym_items_graded") == graded  # no second grading
    assert len(rows(server, "idempotency_key = 'retry-1'")) == 1
    other = httpx.post(
        f"{server.url}/v1/verify",
        json={**body, "response": "different"},
        headers={"Idempotency-Key": "retry-1"},
    )
    assert other.status_code == 409 and "different item" in other.json()["detail"]
    mixed = httpx.post(
        f"{server.url}/v1/verify",
        json={**body, "idempotency_key": "a"},
        headers={"Idempotency-Key": "b"},
    )
    assert mixed.status_code == 409
    dup = httpx.post(
        f"{server.url}/v1/verify/batch",
        json={"items": [{**body, "id": "same"}, {**body, "id": "same"}]},
    )
    assert dup.status_code == 409


def test_a_fast_path_retry_replays_and_a_reused_key_records_nothing(server):
    """Fast-path items skip the read before grading; the writer still replays and refuses."""
    first = httpx.post(
        f"{server.url}/v1/verify", json={"reference": "7", "response": r"\boxed{7}", "id": "fast-1"}
    ).json()
    again = httpx.post(
        f"{server.url}/v1/verify", json={"reference": "7", "response": r"\boxed{7}", "id": "fast-1"}
    ).json()
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["created_at"] == first["created_at"]
    clash = httpx.post(
        f"{server.url}/v1/verify/batch",
        json={
            "items": [
                {"reference": "8", "response": r"\boxed{8}", "id": "fresh-1"},
                {"reference": "7", "response": r"\boxed{9}", "id": "fast-1"},
            ]
        },
    )
    assert clash.status_code == 409 and "different item" in clash.json()["detail"]
    assert rows(server, "id in ('fast-1', 'fresh-1')") == [("fast-1", None, "correct", 1.0)]


NORMAL = {"reference": "12", "response": r"so \boxed{12}"}


def _bad_requests(url):
    post = f"{url}/v1/verify"
    yield (
        "malformed json",
        httpx.post(
            post, content=b'{"reference": "1", ', headers={"content-type": "application/json"}
        ),
        {400},  # as documented: not JSON is 400, JSON that fails the schema is 422
    )
    yield (
        "not json at all",
        httpx.post(
            post, content=b"\xff\xfe\x00garbage", headers={"content-type": "application/json"}
        ),
        {400},
    )
    yield "wrong types", httpx.post(post, json={"reference": 5, "response": ["x"]}), {422}
    yield "missing field", httpx.post(post, json={"reference": "1"}), {422}
    yield "unknown field", httpx.post(post, json={**NORMAL, "reward": 1.0}), {422}
    yield "bad id", httpx.post(post, json={**NORMAL, "id": "has space/slash"}), {422}
    yield "empty reference", httpx.post(post, json={"reference": "", "response": "x"}), {422}
    yield (
        "response too long",
        httpx.post(post, json={"reference": "1", "response": "x" * 300_000}),
        {422},
    )
    yield (
        "body too large",
        httpx.post(post, content=b"x" * (17 << 20), headers={"content-type": "application/json"}),
        {413},
    )

    def chunks():
        for _ in range(20):
            yield b" " * (1 << 20)

    yield (
        "streamed body too large",
        httpx.post(post, content=chunks(), headers={"content-type": "application/json"}),
        {413},
    )
    batch = {"items": [{"reference": "1", "response": r"\boxed{1}"}] * 10_000}
    yield "10,000-item batch", httpx.post(f"{url}/v1/verify/batch", json=batch), {422}
    yield "empty batch", httpx.post(f"{url}/v1/verify/batch", json={"items": []}), {422}
    yield (
        "lone surrogate",
        httpx.post(
            post,
            content=b'{"reference": "1", "response": "\\ud800"}',
            headers={"content-type": "application/json"},
        ),
        {422},
    )
    yield "unknown outcome", httpx.get(f"{url}/v1/outcomes/nope"), {404}
    yield "bad status filter", httpx.get(f"{url}/v1/outcomes", params={"status": "great"}), {422}


def test_bad_input_gets_clear_4xx_and_the_server_keeps_serving(server):
    for name, response, codes in _bad_requests(server.url):
        assert response.status_code in codes, (name, response.status_code, response.text[:300])
        assert response.json()["detail"], name
        assert len(response.content) < 20_000, name  # errors never echo a 10,000-item input
        ok = httpx.post(f"{server.url}/v1/verify", json=NORMAL)
        assert ok.status_code == 200 and ok.json()["status"] == "correct", name
    assert server.alive()


def test_odd_content_is_graded_not_rejected(server):
    with VerifierClient(server.url) as client:
        nul = client.verify("5", "\x00" + r"\boxed{5" + "\x00}")
        assert nul.status is Status.INCORRECT
        big = client.verify("42", "lorem ipsum " * 17_000 + r"\boxed{42}")
        assert big.status is Status.CORRECT
        towers = client.verify_many(
            [("3", r"\boxed{9^{9^{9^{9}}}}"), ("1", r"\boxed{(10^{10})!}"), ("2", r"\boxed{2}")]
        )
        assert [o.status for o in towers] == [Status.TIMEOUT, Status.TIMEOUT, Status.CORRECT]
        assert towers[0].reward is None and towers[0].details["reason"] == "time_limit"
    stored = rows(server, f"id = '{nul.details['id']}'")
    assert stored[0][2] == "incorrect"


def test_environment_grades_through_the_service_unchanged(server):
    with VerifierClient(server.url, run_id="env-run") as client:
        env = gym.make("forkgym/MathDataset-v0", path="math-sample", verifier=client)
        for task_id in list(env.unwrapped.tasks)[:5]:
            env.reset(options={"task_id": task_id})
            info = env.step(env.unwrapped.gold_action())[4]
            assert info["status"] == "correct" and info["outcome"].details["id"]
    assert len(rows(server, "run_id = 'env-run'")) == 5


def test_async_client(server):
    async def main():
        async with AsyncVerifierClient(server.url, batch_size=4) as client:
            single = await client.verify("3", r"\boxed{3}")
            many = await client.verify_many([(str(i), rf"\boxed{{{i}}}") for i in range(10)])
            return single, many

    single, many = asyncio.run(main())
    assert single.status is Status.CORRECT and [o.status for o in many] == [Status.CORRECT] * 10


def test_metrics_are_prometheus_text(server):
    text = httpx.get(f"{server.url}/metrics").text
    assert "# TYPE forkgym_http_requests_total counter" in text
    assert 'forkgym_outcomes_total{replayed="false",status="correct"}' in text
    assert "forkgym_store_commits" in text and "forkgym_record_seconds_bucket" in text


def test_bearer_token_protects_everything_but_health(tmp_path):
    srv = start_server(tmp_path / "auth.db", "--workers", "1", "--token", "s3cret")
    try:
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        for method, path in (
            ("POST", "/v1/verify"),
            ("GET", "/v1/stats"),
            ("GET", "/metrics"),
            ("GET", "/v1/outcomes"),
            ("GET", "/openapi.json"),
            ("GET", "/docs"),
            ("GET", "/redoc"),
        ):
            assert httpx.request(method, f"{srv.url}{path}", json=NORMAL).status_code == 401
            wrong = httpx.request(
                method, f"{srv.url}{path}", json=NORMAL, headers={"Authorization": "Bearer nope"}
            )
            assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        with VerifierClient(srv.url, token="s3cret") as client:
            assert client.verify("12", r"\boxed{12}").status is Status.CORRECT
        auth = {"Authorization": "Bearer s3cret"}
        spec = httpx.get(f"{srv.url}/openapi.json", headers=auth).json()
        assert "/v1/verify" in spec["paths"]
        # the schema declares the token, so generated clients and schemathesis send it
        assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        assert spec["paths"]["/v1/verify"]["post"]["security"] == [{"HTTPBearer": []}]
        assert "swagger" in httpx.get(f"{srv.url}/docs", headers=auth).text.lower()
        with VerifierClient(srv.url, token="wrong", retries=0) as client:
            refused = client.verify("12", r"\boxed{12}")
            assert refused.status is Status.ERROR and refused.details["http_status"] == 401
    finally:
        srv.stop()


def test_public_docs_opens_the_documentation_and_nothing_else(tmp_path):
    srv = start_server(tmp_path / "docs.db", "--workers", "1", "--token", "s3cret", "--public-docs")  # fmt: skip
    try:
        assert httpx.get(f"{srv.url}/openapi.json").status_code == 200
        assert httpx.get(f"{srv.url}/docs").status_code == 200
        assert httpx.post(f"{srv.url}/v1/verify", json=NORMAL).status_code == 401
    finally:
        srv.stop()


def test_serve_refuses_a_busy_port(server):
    import subprocess
    import sys

    port = server.url.rsplit(":", 1)[1]
    proc = subprocess.run(
        [sys.executable, "-m", "forkgym", "serve", "--db", server.db_url, "--port", port],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "cannot listen" in proc.stderr


def test_spawn_returns_a_ready_server_and_reports_one_that_cannot_start(tmp_path, server):
    from forkgym.services.server import spawn

    proc, url = spawn(f"sqlite:///{tmp_path / 's.db'}", "--workers", "1")
    try:
        assert httpx.get(f"{url}/healthz").status_code == 200  # ready when it returns
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with pytest.raises(RuntimeError, match="before it was ready"):
        spawn(server.db_url, "--port", server.url.rsplit(":", 1)[1])  # a busy port


def test_several_processes_share_one_port_and_stop_together(tmp_path):
    """--processes 2: two uvicorn processes accept on one socket, each with its own pool and
    writer; the replica answers and records every request once, and stops as one."""
    import concurrent.futures
    import signal

    from forkgym.services.server import STOPPED_PREFIX

    srv = start_server(tmp_path / "p.db", "--workers", "1", "--processes", "2")
    try:
        children = subprocess_children(srv.proc.pid)
        assert len(children) == 2

        def send(i: int) -> str:
            body = {"reference": str(i), "response": rf"\boxed{{{i}}}", "idempotency_key": f"p{i}"}
            return httpx.post(f"{srv.url}/v1/verify", json=body, timeout=30).json()["status"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert set(pool.map(send, range(200))) == {"correct"}
    finally:
        srv.stop()
    assert srv.proc.returncode == -signal.SIGTERM
    assert srv.proc.stdout.read().startswith(f"{STOPPED_PREFIX}200 outcomes")
    assert len(rows(srv)) == 200
    assert not any(_alive(pid) for pid in children)


def subprocess_children(pid: int) -> list[int]:
    import subprocess

    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    # the grading pools' fork servers are the children's children, not listed here
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_schemathesis_finds_no_server_errors_or_schema_violations(server):
    import subprocess
    import sys
    from pathlib import Path

    cli = Path(sys.executable).with_name("schemathesis")
    proc = subprocess.run(
        [str(cli), "--config-file", str(Path(__file__).with_name("schemathesis.toml")), "run",
         f"{server.url}/openapi.json", "--checks", "all", "--max-examples", "25",
         "--workers", "1", "--phases", "coverage,fuzzing,stateful", "--no-color", "--seed", "20261202"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "No issues found" in proc.stdout
    assert server.alive()
    json.loads(httpx.get(f"{server.url}/v1/stats").text)
