"""The verifier service's routes, one ``APIRouter`` per group; ``create_app`` includes them."""

from .auth import token_guard
from .docs import docs_router
from .ops import ops_router
from .outcomes import outcomes_router
from .responses import invalid_request
from .reward import reward_router
from .shared import Shared
from .verify import verify_router

__all__ = [
    "Shared",
    "docs_router",
    "invalid_request",
    "ops_router",
    "outcomes_router",
    "reward_router",
    "token_guard",
    "verify_router",
]
