"""Client behaviour when the service is unreachable or failing.

The failing service is a real HTTP server on a loopback socket (``http.server``) that answers
503 a given number of times before answering like the verifier service: it stands in for a
service in trouble, which the real one cannot be made into on demand.
"""

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from forkgym.services import AsyncVerifierClient, VerifierClient
from forkgym.verifiers import Status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Flaky:
    """Answers 503 ``failures`` times, then echoes each item as a correct outcome."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.keys: list[list[str]] = []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                items = body.get("items", [body])
                flaky.keys.append([item["idempotency_key"] for item in items])
                if flaky.failures > 0:
                    flaky.failures -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                records = [
                    {"id": item["idempotency_key"], "status": "correct", "reward": 1.0, "extracted": "1",
                     "latency_ms": 0.1, "verifier": "math", "verifier_version": "v", "details": {}, "replayed": False}
                    for item in items
                ]  # fmt: skip
                payload = json.dumps(
                    {"outcomes": records} if "items" in body else records[0]
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_unreachable_service_gives_error_outcomes_not_exceptions():
    url = f"http://127.0.0.1:{free_port()}"
    with VerifierClient(url, retries=2, backoff=0.01) as client:
        start = time.perf_counter()
        outcome = client.verify("1", r"\boxed{1}")
        many = client.verify_many([("1", "a"), ("2", "b"), ("3", "c")])
        assert time.perf_counter() - start < 10
        assert client.attempts == 6  # (1 + 2 retries) for the single, the same for one batch
    for o in [outcome, *many]:
        assert o.status is Status.ERROR and o.reward is None and o.is_infrastructure
        assert o.details["reason"] == "service_unreachable" and "ConnectError" in o.details["error"]


def test_async_unreachable_service_gives_error_outcomes():
    async def main():
        async with AsyncVerifierClient(
            f"http://127.0.0.1:{free_port()}", retries=1, backoff=0.01
        ) as client:
            return await client.verify("1", "x"), await client.verify_many([("1", "a")] * 3)

    single, many = asyncio.run(main())
    assert {o.status for o in [single, *many]} == {Status.ERROR}


def test_retries_after_5xx_reuse_the_same_idempotency_keys():
    flaky = Flaky(failures=2)
    try:
        with VerifierClient(flaky.url, retries=3, backoff=0.01) as client:
            outcome = client.verify("1", r"\boxed{1}")
            assert outcome.status is Status.CORRECT
            assert (
                len(flaky.keys) == 3 and len({tuple(k) for k in flaky.keys}) == 1
            )  # one key, 3 tries
            flaky.failures = 5
            gave_up = client.verify_many([("1", "a"), ("2", "b")])
            assert [o.details["reason"] for o in gave_up] == ["service_error"] * 2
            assert all(o.reward is None for o in gave_up)
            assert len({tuple(k) for k in flaky.keys[3:]}) == 1 and len(flaky.keys[3][0]) == 32
    finally:
        flaky.close()


def test_client_configuration_is_validated():
    with pytest.raises(ValueError):
        VerifierClient("http://x", retries=-1)
    with pytest.raises(ValueError):
        VerifierClient("http://x", batch_size=0)
    with (
        VerifierClient("http://x") as client,
        pytest.raises(ValueError, match="one entry per pair"),
    ):
        client.verify_many([("1", "a")], task_ids=["t1", "t2"])
