"""Tool-use environments: the assistant calls tools until it answers or runs out of turns.

A tool is a method decorated with :func:`tool`; :class:`ToolEnv` collects them, advertises
their JSON schemas in the system prompt through the chosen parser, and on each assistant
message either executes the calls it contains (one ``tool`` message per call) or, when the
message has no call, grades it as the final answer. Nothing the model writes can raise out of
``step``: unparseable calls, unknown tools, wrong argument types and exceptions inside a tool
all become tool messages and a step status (``tool_parse_error``, ``tool_error``,
``tool_timeout``), and the episode goes on until the answer or ``max_turns``.

Tools read and change only ``self.task``, ``self.episode`` (JSON-serialisable) and
``self.np_random``, so a fork replays them exactly.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from gymnasium.error import ResetNeeded

from .base import TextEnv, Turn, _Default
from .math_env import ANSWER_INSTRUCTION
from .tool_parsers import TOOL_PARSERS, ToolCall

__all__ = ["ToolEnv", "ToolResult", "ToolSpec", "tool"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
# A step's status is the most serious thing that happened in it.
_SEVERITY = ["tool_ok", "tool_error", "tool_timeout", "tool_parse_error"]


@dataclass(frozen=True)
class ToolResult:
    content: str
    status: str = "tool_ok"  # tool_ok | tool_error | tool_timeout


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: dict[str, str]  # parameter -> JSON type
    method: Callable[..., ToolResult | str]

    def schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in self.params.items()},
                "required": list(self.params),
            },
        }

    def check_arguments(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit this tool, or None."""
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
            return f"unknown argument(s) {unknown} for {self.name}; it takes {list(self.params)}"
        missing = [p for p in self.params if p not in arguments]
        if missing:
            return f"missing argument(s) {missing} for {self.name}"
        for param, kind in self.params.items():
            value = arguments[param]
            if (isinstance(value, bool) and kind != "boolean") or not isinstance(
                value, _JSON_TYPES[kind]
            ):
                return f"argument {param!r} of {self.name} must be a {kind}, got {type(value).__name__}"
        return None


def tool(description: str, **params: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as a tool: ``@tool("Evaluate an expression.", expression="string")``."""
    for kind in params.values():
        if kind not in _JSON_TYPES:
            raise ValueError(
                f"unsupported parameter type {kind!r}; use one of {sorted(_JSON_TYPES)}"
            )

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        method.__tool__ = (description, dict(params))  # type: ignore[attr-defined]
        return method

    return mark


def _tool_message(content: str, name: str | None, call_id: str | None) -> dict[str, Any]:
    """A ``tool`` message; it names the call it answers when the call was read (OpenAI shape)."""
    message: dict[str, Any] = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    if name is not None and call_id is not None:
        message["name"] = name
    return message


class ToolEnv(TextEnv):
    """Base of the tool-use environments; subclasses add ``@tool`` methods and tasks."""

    tools: ClassVar[dict[str, ToolSpec]] = {}
    instructions: ClassVar[str] = "Solve the task. Use the tools when they help."
    max_calls_per_turn: ClassVar[int] = 8

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = dict(cls.tools)
        for name in dir(cls):
            marked = getattr(getattr(cls, name), "__tool__", None)
            if marked is not None:
                found[name] = ToolSpec(name, marked[0], marked[1], getattr(cls, name))
        cls.tools = found

    def __init__(
        self,
        *,
        config: dict[str, Any],
        tool_parser: str = "hermes",
        max_turns: int = 6,
        **common: Any,
    ) -> None:
        parser = TOOL_PARSERS.lookup(tool_parser)  # before anything is built
        super().__init__(
            config={**config, "tool_parser": tool_parser}, max_turns=max_turns, **common
        )
        self.parser = parser()
        if common.get("system_prompt", _Default) is _Default:  # describe the tools to the model
            schemas = [spec.schema() for spec in self.tools.values()]
            self.system_prompt = f"{self.instructions}\n\n{self.parser.instructions(schemas)}\n\n{ANSWER_INSTRUCTION}"

    @property
    def episode(self) -> dict[str, Any]:
        return self._episode

    def format_call(self, name: str, **arguments: Any) -> str:
        """The text of a call to ``name`` in this env's tool-call format (for gold actions)."""
        return self.parser.format_call(name, arguments)

    def call(self, name: str, **arguments: Any) -> str:
        """Deprecated name of :meth:`format_call` (it formats a call; it does not run one)."""
        warnings.warn(
            "ToolEnv.call() formats a call's text; it is renamed format_call(). To run a tool, "
            "use call_tool().",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.format_call(name, **arguments)

    def call_tool(self, name: str, **arguments: Any) -> ToolResult:
        """Run tool ``name`` on the current episode as a call from the model would (the same
        argument checks, and errors become a ``tool_error`` result instead of raising)."""
        if self._task is None:
            raise ResetNeeded("call reset() first")
        return self._execute(ToolCall(name, arguments))

    def respond(self, action: str) -> Turn:
        calls, problems = self.parser.parse(
            action, {n: list(s.params) for n, s in self.tools.items()}
        )
        if not calls and not problems:
            outcome = self.grade(action)
            return Turn(
                status=outcome.status.value, outcome=outcome, span=self.answer_span(outcome)
            )
        # span, status, text, tool, call id
        events: list[tuple[tuple[int, int], str, str, str | None, str | None]] = []
        for problem in problems:
            events.append(
                (
                    problem.span,
                    "tool_parse_error",
                    f"error: could not parse the tool call: {problem.message}",
                    None,
                    None,
                )
            )
        structured = []  # the calls in OpenAI's shape, ids numbered per turn (forks agree)
        for i, call in enumerate(calls):
            if i >= self.max_calls_per_turn:
                result = ToolResult(
                    f"error: at most {self.max_calls_per_turn} tool calls per message", "tool_error"
                )
            else:
                result = self._execute(call)
            call_id = f"call_{self.turn}_{i}" if self.parser.structured else None
            events.append((call.span, result.status, result.content, call.name, call_id))
            if call_id is not None:
                structured.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                )
        events.sort(key=lambda e: e[0])
        status = max((e[1] for e in events), key=_SEVERITY.index)
        return Turn(
            status=status,
            messages=[_tool_message(text, name, call_id) for _, _, text, name, call_id in events],
            span=(events[0][0][0], max(e[0][1] for e in events)),
            info={"tool_calls": [{"name": name, "status": st} for _, st, _, name, _ in events]},
            tool_calls=structured or None,
        )

    def _execute(self, call: ToolCall) -> ToolResult:
        spec = self.tools.get(call.name)
        if spec is None:
            return ToolResult(
                f"error: unknown tool {call.name!r}; available: {sorted(self.tools)}", "tool_error"
            )
        problem = spec.check_arguments(call.arguments)
        if problem is not None:
            return ToolResult(f"error: {problem}", "tool_error")
        try:
            result = spec.method(self, **call.arguments)
        except Exception as exc:  # a tool bug must not end the rollout
            return ToolResult(
                f"error: {spec.name} failed: {type(exc).__name__}: {exc}", "tool_error"
            )
        return result if isinstance(result, ToolResult) else ToolResult(str(result))
