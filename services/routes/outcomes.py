"""``GET /v1/outcomes/{id}``, ``GET /v1/outcomes`` and ``GET /v1/stats``: reading the store."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response
from starlette.concurrency import run_in_threadpool

from forkgym.store import get_outcome, latency_percentiles, page_outcomes, status_counts

from ..schemas import ID_PATTERN, ErrorResponse, OutcomePage, OutcomeRecord, StatsResponse
from .responses import ERRORS, outcome_json
from .shared import Shared

__all__ = ["outcomes_router"]


def outcomes_router(shared: Shared) -> APIRouter:
    """The read-only routes over recorded outcomes."""
    router = APIRouter()

    @router.get(
        "/v1/outcomes/{outcome_id}",
        response_model=OutcomeRecord,
        dependencies=shared.guarded,
        responses={**ERRORS, 404: {"model": ErrorResponse, "description": "no such outcome"}},
        summary="One recorded outcome",
    )
    async def outcome(outcome_id: Annotated[str, Path(pattern=ID_PATTERN)]) -> Response:
        row = await run_in_threadpool(shared.read, get_outcome, outcome_id)
        if row is None:
            raise HTTPException(404, f"no outcome {outcome_id!r}")
        return outcome_json(row)

    @router.get(
        "/v1/outcomes",
        response_model=OutcomePage,
        dependencies=shared.guarded,
        responses=ERRORS,
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
            shared.read, page_outcomes, run_id=run_id, status=status, after=after, limit=limit
        )
        return outcome_json({"items": rows, "next_after": next_after})

    @router.get(
        "/v1/stats",
        response_model=StatsResponse,
        dependencies=shared.guarded,
        responses=ERRORS,
        summary="Status counts and latency percentiles",
    )
    async def stats(
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    ) -> dict[str, Any]:
        counts = await run_in_threadpool(shared.read, status_counts, run_id=run_id)
        latency = await run_in_threadpool(shared.read, latency_percentiles, run_id=run_id)
        writer = shared.recorder.writer
        return {
            "total": sum(counts.values()),
            "counts": counts,
            "latency_ms": latency,
            "writer_pending": writer.pending,
            "writer_commits": writer.commits,
        }

    return router
