"""The FastAPI application of the verifier service.

Routes: ``POST /v1/verify``, ``POST /v1/verify/batch``, ``GET /v1/outcomes/{id}``,
``GET /v1/outcomes``, ``GET /v1/stats``, ``GET /healthz``, ``GET /metrics``. An outcome is
returned only after it is committed. Grading runs in the worker pool from a thread, so the
event loop keeps serving while a pathological answer runs into its time limit. The routes
live in :mod:`forkgym.services.routes`, one router per group; this module wires them up.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool

from forkgym import __version__

from .config import ServiceConfig
from .edge import Edge
from .metrics import ServiceMetrics
from .recording import Recorder
from .routes import (
    Shared,
    docs_router,
    invalid_request,
    ops_router,
    outcomes_router,
    reward_router,
    token_guard,
    verify_router,
)
from .schemas import make_schemas

__all__ = ["create_app"]


def create_app(
    config: ServiceConfig,
    on_ready: Callable[[], None] | None = None,
    on_stopped: Callable[[Recorder], None] | None = None,
) -> FastAPI:
    """Build the app; the recorder (pool, store, writer) starts with the app's lifespan.

    ``on_ready`` runs once the pool is warm and the store migrated; ``on_stopped`` after the
    writer has flushed every queued outcome and the pool has stopped.
    """
    schemas = make_schemas(config)
    metrics = ServiceMetrics()
    shared = Shared(config, metrics, token_guard(config))
    # with a token, the documentation and the schema are guarded routes of their own
    # (FastAPI's built-in ones answer anyone); public_docs keeps them open
    open_docs = config.token is None or config.public_docs
    app = FastAPI(
        title="forkgym verifier service",
        version=__version__,
        description="Grades answers with hard limits and records every outcome in SQL.",
        lifespan=_lifespan(shared, on_ready, on_stopped),
        docs_url="/docs" if open_docs else None,
        redoc_url="/redoc" if open_docs else None,
        openapi_url="/openapi.json" if open_docs else None,
    )
    app.add_middleware(
        Edge,
        limit=config.max_body_bytes,
        count=lambda route, code: metrics.requests.labels(route, str(code)).inc(),
    )
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    if not open_docs:
        app.include_router(docs_router(app, shared.guarded))
    app.include_router(verify_router(shared, schemas))
    app.include_router(reward_router(shared, schemas))
    app.include_router(outcomes_router(shared))
    app.include_router(ops_router(shared))
    return app


def _lifespan(
    shared: Shared,
    on_ready: Callable[[], None] | None,
    on_stopped: Callable[[Recorder], None] | None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the recorder before the first request; close it (flushing the writer) after the last."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        recorder = await run_in_threadpool(Recorder, shared.config)
        await run_in_threadpool(recorder.start)
        shared.recorder = recorder
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await run_in_threadpool(recorder.close)
            if on_stopped is not None:
                on_stopped(recorder)

    return lifespan
