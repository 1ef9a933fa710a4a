"""The bearer-token check that guards every route but ``/healthz``."""

import secrets
from typing import Annotated, Any

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..config import ServiceConfig

__all__ = ["token_guard"]


def token_guard(config: ServiceConfig) -> list[Any]:
    """The dependencies of a guarded route: the token check, or none when there is no token."""
    token = config.token
    if token is None:
        return []
    bearer = HTTPBearer(auto_error=False, description="required when the service has a token")

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        given = credentials.credentials if credentials is not None else ""
        if not secrets.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return [Depends(authorised)]
