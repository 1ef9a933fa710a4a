"""The FastAPI application of the verifier service.

Routes: ``POST /v1/verify``, ``POST /v1/verify/batch``, ``GET /v1/outcomes/{id}``,
``GET /v1/outcomes``, ``GET /v1/stats``, ``GET /healthz``, ``GET /metrics``. An outcome is
returned only after it is committed. Grading runs in the worker pool from a thread, so the
event loop keeps serving while a pathological answer runs into its time limit.
"""

import asyncio
import json
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from forkgym import __version__
from forkgym.store import get_outcome, latency_percentiles, page_outcomes, status_counts
from forkgym.verifiers import Status

from .config import ServiceConfig
from .metrics import ServiceMetrics
from .recording import Conflict, Item, Recorder
from .schemas import (
    ID_PATTERN,
    ErrorResponse,
    Health,
    OutcomePage,
    OutcomeRecord,
    RewardResponse,
    StatsResponse,
    make_schemas,
)

__all__ = ["create_app"]

STATUS_NAMES = tuple(status.value for status in Status)

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing or wrong bearer token"},
    413: {"model": ErrorResponse, "description": "request body too large"},
}
_POST_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    400: {"model": ErrorResponse, "description": "the body is not JSON"},
    409: {"model": ErrorResponse, "description": "an id or key names a different item"},
}


class Edge:
    """Pure-ASGI outer layer: body-size limit and per-route request counts.

    A body whose declared length is over the limit gets 413 before anything reads it; a body
    without a declared length is counted as it streams in. (Starlette's ``BaseHTTPMiddleware``
    would cost a task group and a stream copy per request, a sixth of the service's time.)
    """

    def __init__(self, app: ASGIApp, limit: int, count: Callable[[str, int], None]) -> None:
        self.app, self.limit, self.count = app, limit, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                declared = value
                break
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            self.count("too_large", 413)
            return
        status = 500

        async def send_and_see(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        if declared is None:  # chunked: count the bytes as they arrive
            seen = 0
            answered = False

            async def limited() -> Message:
                nonlocal seen, answered, status
                if answered:
                    return {"type": "http.disconnect"}
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.limit:  # answer now; the app sees the client go away
                        answered, status = True, 413
                        await self._too_large(send)
                        return {"type": "http.disconnect"}
                return message

            async def unless_answered(message: Message) -> None:
                if not answered:
                    await send_and_see(message)

            await self.app(scope, limited, unless_answered)
        else:
            await self.app(scope, receive, send_and_see)
        route = scope.get("route")
        self.count(getattr(route, "path", "unmatched"), status)

    async def _too_large(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body is larger than {self.limit} bytes"}, status_code=413
        )
        await response({"type": "http"}, _empty_receive, send)


class SafeJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate echoed in an error cannot break it."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":"), default=str).encode(
            "ascii"
        )


_RECORD_FIELDS = tuple(OutcomeRecord.model_fields)


def _record_fields(row: dict[str, Any]) -> dict[str, Any]:
    out = {name: row.get(name) for name in _RECORD_FIELDS}
    created = out["created_at"]
    if created is not None:  # UTC; SQLite hands it back without a zone, so say it explicitly
        out["created_at"] = created.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    out["replayed"] = bool(row.get("replayed", False))
    return out


def _json(content: Any) -> Response:
    """Serialise records straight to JSON bytes.

    The routes declare their response models (so the OpenAPI document is exact), but
    returning a ``Response`` skips FastAPI re-validating every outcome through pydantic on
    the way out, which cost a fifth of a single request here. The shapes are tested against
    the schema by schemathesis.
    """
    if isinstance(content, dict) and "outcomes" in content:
        content = {"outcomes": [_record_fields(r) for r in content["outcomes"]]}
    elif isinstance(content, dict) and "items" in content:
        content = {
            "items": [_record_fields(r) for r in content["items"]],
            "next_after": content["next_after"],
        }
    elif isinstance(content, dict):
        content = _record_fields(content)
    body = json.dumps(content, ensure_ascii=True, separators=(",", ":"))
    return Response(body.encode("ascii"), media_type="application/json")


def _validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic's errors without the offending input (it may be 10,000 items long)."""
    return [
        {k: v for k, v in error.items() if k not in {"input", "url", "ctx"}} for error in errors
    ][:50]


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}


async def _watch_disconnect(request: Request, cancel: threading.Event) -> None:
    """Set ``cancel`` once the client has gone (checked every 50 ms while grading runs)."""
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(0.05)


def _guarded_docs(app: FastAPI, guarded: list[Any]) -> None:
    """``/openapi.json``, ``/docs`` and ``/redoc`` behind the bearer token."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

    @app.get("/openapi.json", dependencies=guarded, include_in_schema=False)
    async def openapi() -> Response:
        return JSONResponse(app.openapi())

    @app.get("/docs", dependencies=guarded, include_in_schema=False)
    async def docs() -> Response:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")

    @app.get("/redoc", dependencies=guarded, include_in_schema=False)
    async def redoc() -> Response:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


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
    VerifyRequest, BatchRequest, BatchResponse, RewardRequest = (
        schemas.VerifyRequest,
        schemas.BatchRequest,
        schemas.BatchResponse,
        schemas.RewardRequest,
    )
    metrics = ServiceMetrics()
    state: dict[str, Recorder] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        recorder = await run_in_threadpool(Recorder, config)
        await run_in_threadpool(recorder.start)
        state["recorder"] = recorder
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await run_in_threadpool(recorder.close)
            if on_stopped is not None:
                on_stopped(recorder)

    # with a token, the documentation and the schema are guarded routes of their own
    # (FastAPI's built-in ones answer anyone); public_docs keeps them open
    open_docs = config.token is None or config.public_docs
    app = FastAPI(
        title="forkgym verifier service",
        version=__version__,
        description="Grades answers with hard limits and records every outcome in SQL.",
        lifespan=lifespan,
        docs_url="/docs" if open_docs else None,
        redoc_url="/redoc" if open_docs else None,
        openapi_url="/openapi.json" if open_docs else None,
    )
    app.add_middleware(
        Edge,
        limit=config.max_body_bytes,
        count=lambda route, code: metrics.requests.labels(route, str(code)).inc(),
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        # a body that is not JSON at all is a malformed request (400), not a JSON document
        # that fails the schema (422), as the routes' documented errors say
        code = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
        return SafeJSONResponse({"detail": _validation_errors(errors)}, status_code=code)

    bearer = HTTPBearer(auto_error=False, description="required when the service has a token")

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if config.token is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not secrets.compare_digest(given.encode(), config.token.encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    guarded = [Depends(authorised)] if config.token is not None else []
    if not open_docs:
        _guarded_docs(app, guarded)

    async def record(items: list[Item], request: Request) -> list[dict[str, Any]]:
        recorder = state["recorder"]
        request_id = uuid.uuid4().hex
        start = time.perf_counter()
        try:
            # Inline: the fast path, and one indexed SELECT when an item needs the pool. A
            # thread hop costs more than either here; only symbolic answers take one.
            hashes, graded, found, todo = recorder.triage(items)
            if todo:
                cancel = threading.Event()  # set when the client goes away: grading stops
                watcher = asyncio.create_task(_watch_disconnect(request, cancel))
                try:
                    graded.update(await run_in_threadpool(recorder.grade_pool, items, todo, cancel))
                finally:
                    watcher.cancel()
                if cancel.is_set():  # nobody to answer; nothing recorded, so a retry grades
                    raise HTTPException(499, "the client closed the connection")
            slots = [found.get(i) for i in range(len(items))]
            new_rows = recorder.build_rows(items, hashes, graded, request_id)
            recorded = await asyncio.wrap_future(recorder.submit(new_rows)) if new_rows else []
            rows = recorder.merge(slots, new_rows, recorded)
        except Conflict as exc:
            raise HTTPException(409, str(exc)) from None
        metrics.observe(rows, time.perf_counter() - start)
        return rows

    def to_item(body: Any) -> Item:
        return Item(**body.model_dump())

    @app.post(
        "/v1/verify",
        response_model=OutcomeRecord,
        dependencies=guarded,
        responses=_POST_ERRORS,
        summary="Grade one answer and record the outcome",
    )
    async def verify(
        request: Request,
        body: VerifyRequest,  # type: ignore[valid-type]
        idempotency_key: Annotated[str | None, Header(pattern=ID_PATTERN)] = None,
    ) -> Response:
        item = to_item(body)
        if idempotency_key is not None:
            if item.idempotency_key not in (None, idempotency_key):
                raise HTTPException(
                    409, "the Idempotency-Key header and the idempotency_key field differ"
                )
            item.idempotency_key = idempotency_key
        return _json((await record([item], request))[0])

    @app.post(
        "/v1/verify/batch",
        response_model=BatchResponse,
        dependencies=guarded,
        responses=_POST_ERRORS,
        summary="Grade many answers in parallel; outcomes come back in order",
    )
    async def verify_batch(request: Request, body: BatchRequest) -> Response:  # type: ignore[valid-type]
        items = [to_item(entry) for entry in body.items]  # type: ignore[attr-defined]
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            for value in (item.id, item.idempotency_key):
                if value is not None and seen.setdefault(value, i) != i:
                    raise HTTPException(
                        409, f"items {seen[value]} and {i} share the id or key {value!r}"
                    )
        return _json({"outcomes": await record(items, request)})

    @app.post(
        "/get_reward",
        response_model=RewardResponse,
        dependencies=guarded,
        responses={
            **_POST_ERRORS,
            503: {
                "model": ErrorResponse,
                "description": "a sample timed out or errored and null_reward is None",
            },
        },
        summary="OpenRLHF's remote reward shape: query/prompts/labels in, one float each out",
    )
    async def get_reward(request: Request, body: RewardRequest) -> Response:  # type: ignore[valid-type]
        """Each ``query`` is the prompt followed by the response (OpenRLHF's convention): the
        response is what follows ``prompts[i]`` when the query starts with it, else the whole
        query. ``labels`` are the references. Every outcome is recorded like any other; a
        timeout or error (reward None) becomes ``null_reward`` (0.0 by default; the status
        still says what happened), or, with ``null_reward`` None, the request fails with 503
        naming the samples."""
        query, labels = body.query, body.labels  # type: ignore[attr-defined]
        prompts = body.prompts  # type: ignore[attr-defined]
        if len(labels) != len(query) or (prompts is not None and len(prompts) != len(query)):
            got = f"{len(query)}, {len(prompts) if prompts is not None else '-'}, {len(labels)}"
            raise RequestValidationError(
                [
                    {
                        "loc": ("body",),
                        "type": "value_error",
                        "msg": f"query, prompts and labels must have one entry per sample (got {got})",
                    }
                ]
            )
        items = []
        for i, (text, label) in enumerate(zip(query, labels, strict=True)):
            prompt = prompts[i] if prompts is not None else ""
            response = text[len(prompt) :] if prompt and text.startswith(prompt) else text
            reference = "" if label is None else str(label)  # "": graded invalid, no_reference
            items.append(Item(reference=reference, response=response, task_id="openrlhf"))
        rows = await record(items, request)
        missing = [i for i, row in enumerate(rows) if row["reward"] is None]
        if missing and config.null_reward is None:
            raise HTTPException(503, f"samples {missing} have no reward ({', '.join(rows[i]['status'] for i in missing)})")  # fmt: skip
        rewards = [config.null_reward if row["reward"] is None else row["reward"] for row in rows]
        statuses = [row["status"] for row in rows]
        return SafeJSONResponse(
            {
                "rewards": rewards,
                "scores": rewards,
                "extra_logs": {
                    f"status_{name}": [float(status == name) for status in statuses]
                    for name in STATUS_NAMES
                },
                "statuses": statuses,
                "ids": [row["id"] for row in rows],
            }
        )

    @app.get(
        "/v1/outcomes/{outcome_id}",
        response_model=OutcomeRecord,
        dependencies=guarded,
        responses={**_ERRORS, 404: {"model": ErrorResponse, "description": "no such outcome"}},
        summary="One recorded outcome",
    )
    async def outcome(outcome_id: Annotated[str, Path(pattern=ID_PATTERN)]) -> Response:
        row = await run_in_threadpool(_read, get_outcome, outcome_id)
        if row is None:
            raise HTTPException(404, f"no outcome {outcome_id!r}")
        return _json(row)

    @app.get(
        "/v1/outcomes",
        response_model=OutcomePage,
        dependencies=guarded,
        responses=_ERRORS,
        summary="Recorded outcomes, oldest first, a page at a time",
    )
    async def outcomes(
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
        status: Annotated[
            str | None, Query(pattern="^(correct|incorrect|invalid|truncated|timeout|error)$")
        ] = None,
        after: Annotated[
            int, Query(ge=0, le=2**62, description="cursor: next_after of the previous page")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> Response:
        rows, next_after = await run_in_threadpool(
            _read, page_outcomes, run_id=run_id, status=status, after=after, limit=limit
        )
        return _json({"items": rows, "next_after": next_after})

    @app.get(
        "/v1/stats",
        response_model=StatsResponse,
        dependencies=guarded,
        responses=_ERRORS,
        summary="Status counts and latency percentiles",
    )
    async def stats(
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    ) -> dict[str, Any]:
        counts = await run_in_threadpool(_read, status_counts, run_id=run_id)
        latency = await run_in_threadpool(_read, latency_percentiles, run_id=run_id)
        writer = state["recorder"].writer
        return {
            "total": sum(counts.values()),
            "counts": counts,
            "latency_ms": latency,
            "writer_pending": writer.pending,
            "writer_commits": writer.commits,
        }

    @app.get("/healthz", response_model=Health, summary="Liveness (never needs a token)")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "verifier_version": state["recorder"].verifier.version,
        }

    @app.get(
        "/metrics",
        dependencies=guarded,
        responses={
            **_ERRORS,
            200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        },
        response_class=Response,
        summary="Prometheus metrics",
    )
    async def prometheus() -> Response:
        recorder = state["recorder"]
        body, content_type = metrics.render(recorder)
        return Response(body, media_type=content_type)

    def _read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with state["recorder"].read_engine.connect() as conn:
            return fn(conn, *args, **kwargs)

    return app
