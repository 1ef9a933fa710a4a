"""The service's outermost ASGI layer: the body-size limit and the per-route request counts."""

from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Edge"]


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


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}
