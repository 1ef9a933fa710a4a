"""``forkgym sandbox serve``: the Python tool's OS sandbox as an HTTP service with
SandboxFusion's ``/run_code`` shape (:mod:`forkgym.envs.sandbox.remote` is the client).

Each request runs in a fresh sandbox (:func:`forkgym.envs.sandbox.run_python`), at most
``concurrency`` at a time (the rest wait their turn); limits come from the request, capped by
the server's own. Only ``language: python`` is served; anything else is a 422 with the reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from forkgym import __version__
from forkgym.envs.sandbox import SandboxLimits, run_python

__all__ = ["RunCode", "create_sandbox_app"]


class RunCode(BaseModel):
    code: str = Field(max_length=1_000_000)
    language: Literal["python"] = "python"
    run_timeout: float = Field(default=5.0, gt=0)
    memory_limit_MB: int = Field(default=-1)  # -1: the server's limit
    stdin: str = Field(default="", max_length=0)  # the tool sends none; refused if given


def create_sandbox_app(
    limits: SandboxLimits | None = None, concurrency: int = 2, isolation: str = "auto"
) -> FastAPI:
    from forkgym.envs.sandbox import isolation as iso

    limits = limits or SandboxLimits()
    mode = iso.resolve(isolation)  # refuse to start where the machine cannot isolate
    app = FastAPI(title="forkgym sandbox", version=__version__)
    gate = asyncio.Semaphore(concurrency)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "isolation": mode}

    @app.post("/run_code")
    async def run_code(body: RunCode) -> dict[str, object]:
        memory = limits.memory_mb if body.memory_limit_MB <= 0 else body.memory_limit_MB
        mine = replace(
            limits,
            wall_seconds=min(body.run_timeout, limits.wall_seconds),
            memory_mb=min(memory, limits.memory_mb),
        )
        async with gate:
            result = await run_in_threadpool(run_python, body.code, mine, 0, mode)
        if result.status == "tool_timeout":
            state = "TimeLimitExceeded"
        elif result.reason in ("ok", "exception", "exit_status", "output_limit"):
            state = "Finished"
        else:
            state = "Error"
        return {
            "status": "Success" if result.status == "tool_ok" else "Failed",
            "message": "" if result.status == "tool_ok" else result.reason,
            "compile_result": None,
            "run_result": {
                "status": state,
                "execution_time": result.seconds,
                "return_code": result.exit_code,
                "stdout": result.stdout,
                "stderr": result.stderr,
            },
            "files": {},
        }

    return app
