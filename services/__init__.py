"""The verifier as an HTTP service (FastAPI + uvicorn, outcomes in SQL) and its clients.

``from forkgym.services import VerifierClient, AsyncVerifierClient`` needs only httpx; the
server side (``create_app``, ``serve``) is imported on first use.
"""

if __name__ != "forkgym.services":  # imported as a top-level `services` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.services; install forkgym "
        "(`pip install -e .`) and import forkgym.services instead of `services`"
    )


from typing import Any

from .client import AsyncVerifierClient, ServiceError, VerifierClient
from .config import ServiceConfig

__all__ = [
    "AsyncVerifierClient",
    "ServiceConfig",
    "ServiceError",
    "VerifierClient",
    "create_app",
    "serve",
]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "serve":
        from .server import serve

        return serve
    raise AttributeError(name)
