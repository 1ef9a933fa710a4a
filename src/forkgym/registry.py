"""One small registry for every family that users extend by name.

Estimators, policy losses, learning-rate schedules, answer extractors, tool-call parsers,
training algorithms and generation backends are each a :class:`Registry`: a ``dict`` from
name to object (so ``name in R``, ``sorted(R)`` and ``R[name]`` work as for any mapping)
that refuses a name twice and names what is registered when a lookup fails.

A user's own entry is one decorator away, and from then on it is reachable by name from
configs and the command line::

    from forkgym.agents.advantages.estimators import ESTIMATORS, Estimator

    @ESTIMATORS.register("my_baseline")
    class MyBaseline(Estimator):
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict[str, T]):
    """Name -> object, for one ``kind`` of thing (used in error messages)."""

    def __init__(
        self, kind: str, *, name_attribute: str | None = None, base: type | None = None
    ) -> None:
        super().__init__()
        self.kind = kind
        self._name_attribute = name_attribute  # set on registered classes, e.g. ``cls.name``
        # where the family has a base class, every entry is a subclass of it: what a part can
        # do is declared on the base with defaults, and read the same way from every entry
        self.base = base

    def register(self, name: str, obj: T | None = None) -> Any:
        """``register(name, obj)``, or ``@register(name)`` as a decorator; a name only once."""
        if obj is None:

            def decorate(target: T) -> T:
                self.register(name, target)
                return target

            return decorate
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            where = f"{self.base.__module__}.{self.base.__qualname__}"
            raise TypeError(f"{self.kind} {name!r} must be a subclass of {where}, got {obj!r}")
        self[name] = obj
        if self._name_attribute and isinstance(obj, type):
            setattr(obj, self._name_attribute, name)
        return obj

    def lookup(self, name: str) -> T:
        """The entry called ``name``; a ``ValueError`` listing the registered names if none."""
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {sorted(self)}") from None

    def build(self, name: str, **config: Any) -> Any:
        """Call the entry (a class or factory) with its keyword configuration."""
        factory: Callable[..., Any] = self.lookup(name)  # type: ignore[assignment]
        return factory(**config)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self)})"
