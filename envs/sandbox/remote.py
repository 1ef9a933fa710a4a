"""The Python tool on a remote code-execution service with SandboxFusion's request shape.

Users who run code tools at scale keep execution off the training machines: ``POST
{url}/run_code`` with ``{"code", "language": "python", "run_timeout", "memory_limit_MB",
"stdin"}``, answered with ``{"status": "Success" | "Failed" | "SandboxError", "message",
"run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error", "return_code",
"stdout", "stderr", "execution_time"}}``. SandboxFusion serves that, and so does
``forkgym sandbox serve`` (:mod:`forkgym.services.sandbox_app`, this package's own OS
sandbox behind the same route).

The tool statuses stay apart: the program's own failure is ``tool_error``, its time limit
``tool_timeout``, and a service that is down, refuses or answers nonsense is also
``tool_error`` but with reason ``sandbox_unavailable``, so an infrastructure failure is never
read as the program's output.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from .local import SandboxLimits, SandboxResult

__all__ = ["run_remote"]


def _unavailable(why: str, seconds: float) -> SandboxResult:
    return SandboxResult("tool_error", "", why, None, "sandbox_unavailable", seconds)


def run_remote(
    code: str,
    limits: SandboxLimits,
    url: str,
    *,
    client: httpx.Client | None = None,
) -> SandboxResult:
    """Run ``code`` on the service at ``url``; never raises for the program or the service."""
    body: dict[str, Any] = {
        "code": code,
        "language": "python",
        "run_timeout": limits.wall_seconds,
        "memory_limit_MB": limits.memory_mb,
        "stdin": "",
    }
    start = time.perf_counter()
    own = client is None
    http = client or httpx.Client(timeout=limits.wall_seconds + 30)
    try:
        response = http.post(f"{url.rstrip('/')}/run_code", json=body)
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return _unavailable(f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
    finally:
        if own:
            http.close()
    seconds = time.perf_counter() - start
    run = data.get("run_result") if isinstance(data, dict) else None
    if response.status_code >= 400 or not isinstance(run, dict):
        message = data.get("message") if isinstance(data, dict) else None
        return _unavailable(f"HTTP {response.status_code}: {message or str(data)[:200]}", seconds)
    clip = limits.output_bytes
    stdout, stderr = str(run.get("stdout") or "")[:clip], str(run.get("stderr") or "")[:clip]
    code_ = run.get("return_code")
    state = run.get("status")
    if state == "TimeLimitExceeded":
        return SandboxResult("tool_timeout", stdout, stderr, code_, "wall_limit", seconds)
    if state == "Finished" and code_ == 0:
        return SandboxResult("tool_ok", stdout, stderr, 0, "ok", seconds)
    if state in ("Finished", "Error"):
        reason = "exception" if code_ == 1 else "exit_status"
        return SandboxResult("tool_error", stdout, stderr, code_, reason, seconds)
    return _unavailable(f"unknown run status {state!r}", seconds)
