"""``POST /get_reward``: OpenRLHF's remote reward shape over the same grading and recording."""

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError

from forkgym.verifiers import Status

from ..recording import Item
from ..schemas import ErrorResponse, RewardResponse, Schemas
from .grading import record
from .responses import POST_ERRORS, SafeJSONResponse
from .shared import Shared

__all__ = ["reward_router"]

STATUS_NAMES = tuple(status.value for status in Status)


def reference_from_label(label: Any, max_chars: int) -> tuple[str, str | None]:
    """``(reference, why it is unusable or None)`` for one OpenRLHF label: text as it is, a
    number as its text, null as no reference; a bool (``true`` is not the answer 1), a list, an
    object, over-long or non-Unicode text cannot be graded against."""
    if label is None:
        return "", None
    if isinstance(label, bool):
        return "", "a boolean"
    if isinstance(label, (int, float)):
        return str(label), None
    if not isinstance(label, str):
        return "", "a JSON list" if isinstance(label, list) else "a JSON object"
    if len(label) > max_chars:
        return "", f"text longer than {max_chars} characters"
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        return "", "text that is not valid Unicode"
    return label, None


def reward_router(shared: Shared, schemas: Schemas) -> APIRouter:
    """The reward route; ``schemas`` holds its request model sized by the config."""
    RewardRequest = schemas.RewardRequest
    config = shared.config
    router = APIRouter()

    @router.post(
        "/get_reward",
        response_model=RewardResponse,
        dependencies=shared.guarded,
        responses={
            **POST_ERRORS,
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
            reference, unusable = reference_from_label(label, config.max_reference_chars)
            items.append(
                Item(reference=reference, response=response, task_id="openrlhf", unusable=unusable)
            )
        rows = await record(shared, items, request)
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

    return router
