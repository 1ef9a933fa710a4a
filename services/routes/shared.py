"""The state every router reads: settings, metrics, the token guard and the recorder."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import ServiceConfig
from ..metrics import ServiceMetrics
from ..recording import Recorder

__all__ = ["Shared"]


@dataclass
class Shared:
    """One app's state; the lifespan sets ``recorder`` once the pool and store are up."""

    config: ServiceConfig
    metrics: ServiceMetrics
    guarded: list[Any]  # the dependencies of a token-guarded route (none without a token)
    _recorder: Recorder | None = field(default=None, init=False, repr=False)

    @property
    def recorder(self) -> Recorder:
        if self._recorder is None:
            raise RuntimeError("the service has not started: no recorder yet")
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(conn, *args, **kwargs)`` on a connection of the read engine (blocking)."""
        with self.recorder.read_engine.connect() as conn:
            return fn(conn, *args, **kwargs)
