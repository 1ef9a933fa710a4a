"""``POST /v1/verify`` and ``POST /v1/verify/batch``: grade answers and record the outcomes."""

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response

from ..schemas import ID_PATTERN, OutcomeRecord, Schemas
from .grading import record, to_item
from .responses import POST_ERRORS, outcome_json
from .shared import Shared

__all__ = ["verify_router"]


def verify_router(shared: Shared, schemas: Schemas) -> APIRouter:
    """The grading routes; ``schemas`` holds the request models sized by the config."""
    VerifyRequest, BatchRequest = schemas.VerifyRequest, schemas.BatchRequest
    router = APIRouter()

    @router.post(
        "/v1/verify",
        response_model=OutcomeRecord,
        dependencies=shared.guarded,
        responses=POST_ERRORS,
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
        return outcome_json((await record(shared, [item], request))[0])

    @router.post(
        "/v1/verify/batch",
        response_model=schemas.BatchResponse,
        dependencies=shared.guarded,
        responses=POST_ERRORS,
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
        return outcome_json({"outcomes": await record(shared, items, request)})

    return router
