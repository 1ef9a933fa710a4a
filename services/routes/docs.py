"""``/openapi.json``, ``/docs`` and ``/redoc`` behind the bearer token."""

from typing import Any

from fastapi import APIRouter, FastAPI, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import JSONResponse

__all__ = ["docs_router"]


def docs_router(app: FastAPI, guarded: list[Any]) -> APIRouter:
    """Guarded copies of FastAPI's own documentation routes (which answer anyone)."""
    router = APIRouter()

    @router.get("/openapi.json", dependencies=guarded, include_in_schema=False)
    async def openapi() -> Response:
        return JSONResponse(app.openapi())

    @router.get("/docs", dependencies=guarded, include_in_schema=False)
    async def docs() -> Response:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")

    @router.get("/redoc", dependencies=guarded, include_in_schema=False)
    async def redoc() -> Response:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")

    return router
