"""How the routes answer: documented errors, JSON bodies and the validation-error handler."""

import json
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..schemas import ErrorResponse, OutcomeRecord

__all__ = ["ERRORS", "POST_ERRORS", "SafeJSONResponse", "invalid_request", "outcome_json"]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing or wrong bearer token"},
    413: {"model": ErrorResponse, "description": "request body too large"},
}
POST_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    400: {"model": ErrorResponse, "description": "the body is not JSON"},
    409: {"model": ErrorResponse, "description": "an id or key names a different item"},
}

_RECORD_FIELDS = tuple(OutcomeRecord.model_fields)


class SafeJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate echoed in an error cannot break it."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":"), default=str).encode(
            "ascii"
        )


def _record_fields(row: dict[str, Any]) -> dict[str, Any]:
    out = {name: row.get(name) for name in _RECORD_FIELDS}
    created = out["created_at"]
    if created is not None:  # UTC; SQLite hands it back without a zone, so say it explicitly
        out["created_at"] = created.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    out["replayed"] = bool(row.get("replayed", False))
    return out


def outcome_json(content: Any) -> Response:
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


async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
    """400 for a body that is not JSON at all, 422 for JSON that fails the schema."""
    errors = exc.errors()
    # a body that is not JSON at all is a malformed request (400), not a JSON document
    # that fails the schema (422), as the routes' documented errors say
    code = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
    return SafeJSONResponse({"detail": _validation_errors(errors)}, status_code=code)
