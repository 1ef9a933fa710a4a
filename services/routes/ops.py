"""``GET /healthz`` and ``GET /metrics``: liveness and Prometheus metrics."""

from typing import Any

from fastapi import APIRouter, Response

from forkgym import __version__

from ..schemas import Health
from .responses import ERRORS
from .shared import Shared

__all__ = ["ops_router"]


def ops_router(shared: Shared) -> APIRouter:
    """The operator's routes: liveness (never guarded) and metrics."""
    router = APIRouter()

    @router.get("/healthz", response_model=Health, summary="Liveness (never needs a token)")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "verifier_version": shared.recorder.verifier.version,
        }

    @router.get(
        "/metrics",
        dependencies=shared.guarded,
        responses={
            **ERRORS,
            200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        },
        response_class=Response,
        summary="Prometheus metrics",
    )
    async def prometheus() -> Response:
        body, content_type = shared.metrics.render(shared.recorder)
        return Response(body, media_type=content_type)

    return router
