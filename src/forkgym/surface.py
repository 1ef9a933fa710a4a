"""A package's public surface, imported on first use.

A stage package (``forkgym.agents.generation``, ...) names what the rest of the code imports
from it without importing its modules when the package itself is imported: importing one of
its modules (``forkgym.agents.episode``) runs the package's ``__init__``, and an
``__init__`` that imported the stage's heavier modules would pull them in too, and could
close an import cycle through a module still half-initialised. ::

    __getattr__, __dir__ = surface(__name__, {"Generation": ".stage", ...})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["surface"]


def surface(
    package: str, names: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``names`` maps each public name to
    the module (relative to the package) that defines it."""

    def getattr_(name: str) -> Any:
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module, package), name)

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
