"""Tool-call parsers: find the calls in an assistant message, or say exactly why not.

Parsing failures are the most reported problem of tool-use RL, so a parser never raises on
model output: it returns the calls it could read and a :class:`ParseProblem` for each part it
could not, with the span of text concerned. Parsers are looked up by name in
:data:`TOOL_PARSERS`.

* ``hermes`` (default; Hermes/Qwen style):
  ``<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>``
  (``arguments`` may also be a JSON-encoded string, as some models emit);
* ``tags`` (plain, for small models): ``<calculator>2+2</calculator>`` whose body is either a
  JSON object of arguments or, for a tool with one parameter, that parameter's raw value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from forkgym.registry import Registry

__all__ = ["TOOL_PARSERS", "HermesParser", "ParseProblem", "TagParser", "ToolCall", "ToolParser"]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class ParseProblem:
    message: str
    span: tuple[int, int]


class ToolParser(Protocol):
    name: ClassVar[str]
    structured: ClassVar[bool]

    def parse(
        self, text: str, tools: dict[str, list[str]]
    ) -> tuple[list[ToolCall], list[ParseProblem]]:
        """``tools`` maps each tool name to its parameter names."""
        ...

    def format_call(self, name: str, arguments: dict[str, Any]) -> str: ...

    def instructions(self, tool_schemas: list[dict[str, Any]]) -> str: ...


def _schema_block(tool_schemas: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(schema, sort_keys=True) for schema in tool_schemas)


class HermesParser:
    """``<tool_call>{json}</tool_call>`` blocks, as in Hermes and Qwen chat templates."""

    name: ClassVar[str] = "hermes"
    # its calls are reported in OpenAI's shape (`tool_calls`, `tool_call_id`): chat templates
    # and tool parsers elsewhere read and write this format
    structured: ClassVar[bool] = True
    _OPEN, _CLOSE = "<tool_call>", "</tool_call>"

    def parse(
        self, text: str, tools: dict[str, list[str]]
    ) -> tuple[list[ToolCall], list[ParseProblem]]:
        calls: list[ToolCall] = []
        problems: list[ParseProblem] = []
        pos = 0
        while (start := text.find(self._OPEN, pos)) >= 0:
            body_start = start + len(self._OPEN)
            end = text.find(self._CLOSE, body_start)
            if end < 0:
                problems.append(
                    ParseProblem("unclosed <tool_call> (no </tool_call>)", (start, len(text)))
                )
                break
            pos = end + len(self._CLOSE)
            span = (start, pos)
            try:
                payload = json.loads(text[body_start:end])
            except json.JSONDecodeError as exc:
                problems.append(
                    ParseProblem(f"tool call is not valid JSON: {exc.msg} at char {exc.pos}", span)
                )
                continue
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
                problems.append(
                    ParseProblem('a tool call must be a JSON object with a string "name"', span)
                )
                continue
            arguments = payload.get("arguments", {})
            if isinstance(arguments, str):  # some models double-encode the arguments
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError:
                    problems.append(ParseProblem('"arguments" is a string that is not JSON', span))
                    continue
            if not isinstance(arguments, dict):
                problems.append(ParseProblem('"arguments" must be a JSON object', span))
                continue
            calls.append(ToolCall(payload["name"], arguments, span))
        if not calls and not problems and self._CLOSE in text:
            i = text.find(self._CLOSE)
            problems.append(
                ParseProblem(
                    "</tool_call> without an opening <tool_call>", (i, i + len(self._CLOSE))
                )
            )
        return calls, problems

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return f"{self._OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{self._CLOSE}"

    def instructions(self, tool_schemas: list[dict[str, Any]]) -> str:
        # forkgym's chat template (agents/tokenizer.py) writes the same text for `tools=`
        first = tool_schemas[0]
        example = {p: "..." for p in (first.get("parameters") or {}).get("properties") or {}}
        return (
            "You can call tools. Their signatures, as JSON schemas:\n"
            f"<tools>\n{_schema_block(tool_schemas)}\n</tools>\n"
            "To call a tool, write a JSON object with the tool's name and arguments between "
            "<tool_call> and </tool_call>, for example:\n"
            f"{self.format_call(first['name'], example)}\n"
            "The results come back in the next message. When you know the answer, reply without a "
            "tool call."
        )


class TagParser:
    """``<tool_name>body</tool_name>``: body is a JSON object or a single parameter's value."""

    name: ClassVar[str] = "tags"
    # forkgym's own format for tiny models: its calls stay in the text only (a chat template
    # would render structured calls Hermes style, beside the tags)
    structured: ClassVar[bool] = False

    def parse(
        self, text: str, tools: dict[str, list[str]]
    ) -> tuple[list[ToolCall], list[ParseProblem]]:
        calls: list[ToolCall] = []
        problems: list[ParseProblem] = []
        if not tools:
            return calls, problems
        names = "|".join(re.escape(n) for n in sorted(tools, key=len, reverse=True))
        opening = re.compile(rf"<({names})>")
        pos = 0
        # One left-to-right pass (a lazy `<x>(.*?)</x>` regex is quadratic on unclosed tags).
        while (match := opening.search(text, pos)) is not None:
            name = match.group(1)
            close = text.find(f"</{name}>", match.end())
            if close < 0:
                problems.append(ParseProblem(f"unclosed <{name}>", (match.start(), len(text))))
                break
            span = (match.start(), close + len(name) + 3)
            pos = span[1]
            body, params = text[match.end() : close].strip(), tools[name]
            if body.startswith("{"):
                try:
                    arguments = json.loads(body)
                except json.JSONDecodeError as exc:
                    problems.append(
                        ParseProblem(f"<{name}> body is not valid JSON: {exc.msg}", span)
                    )
                    continue
                if not isinstance(arguments, dict):
                    problems.append(ParseProblem(f"<{name}> body must be a JSON object", span))
                    continue
            elif len(params) == 1:
                arguments = {params[0]: body}
            else:
                problems.append(
                    ParseProblem(
                        f"<{name}> takes {len(params)} arguments: give a JSON object", span
                    )
                )
                continue
            calls.append(ToolCall(name, arguments, span))
        return calls, problems

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        body = next(iter(arguments.values())) if len(arguments) == 1 else json.dumps(arguments)
        return f"<{name}>{body}</{name}>"

    def instructions(self, tool_schemas: list[dict[str, Any]]) -> str:
        return (
            "You can call tools. Their signatures, as JSON schemas:\n"
            f"{_schema_block(tool_schemas)}\n"
            "To call a tool, write <NAME>ARGUMENT</NAME>, for example "
            f"<{tool_schemas[0]['name']}>...</{tool_schemas[0]['name']}>; for a tool with several "
            "arguments, write them as a JSON object between the tags. When you know the answer, "
            "reply without a tool call."
        )


TOOL_PARSERS: Registry[type[ToolParser]] = Registry("tool parser")
TOOL_PARSERS.register("hermes", HermesParser)
TOOL_PARSERS.register("tags", TagParser)
