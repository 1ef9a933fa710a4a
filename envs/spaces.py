"""Spaces that really contain what a text environment emits.

``gymnasium.spaces.Text`` checks every character against its charset, which defaults to
``[a-zA-Z0-9]``: ``"What is 2+2?"`` is not in ``Text(64)``. Listing all of Unicode as a charset
would cost a 1.1M-element set per space. :class:`UnicodeText` contains *any* Python string within
its length bounds and samples from a printable subset (ASCII plus some Greek, maths symbols and
CJK), which is enough for Gymnasium's checker and for fuzzing an environment with random actions.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

from gymnasium import spaces

__all__ = [
    "DEFAULT_MAX_CHARS",
    "MessageSpace",
    "UnicodeText",
    "chat_observation_space",
    "message_space",
]

DEFAULT_MAX_CHARS = 1 << 20
_SAMPLE_CHARSET = string.printable + "αβγδπθλΣ±×÷≤≥≠√∞∫°€—中文数学"


class UnicodeText(spaces.Text):
    """Any ``str`` of ``min_length``..``max_length`` characters (all Unicode code points)."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable (seeded) like every Gymnasium space


class MessageSpace(spaces.Dict):
    """One chat message: ``{"role": str, "content": str}`` and, in OpenAI's shape, optionally
    ``tool_calls`` (an assistant's calls: a list of ``{"id", "type": "function", "function":
    {"name", "arguments"}}``), ``tool_call_id`` and ``name`` (a tool message answering one).

    ``gymnasium.spaces.Dict`` requires exactly its keys, and these three appear only on some
    messages, so membership is checked here; samples are plain role/content messages.
    """

    OPTIONAL: ClassVar[dict[str, type]] = {"tool_calls": list, "tool_call_id": str, "name": str}

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS, seed: Any = None) -> None:
        super().__init__({"role": UnicodeText(16), "content": UnicodeText(max_chars)}, seed=seed)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or not all(k in x for k in self.spaces):
            return False
        extra = set(x) - set(self.spaces)
        return all(self.spaces[k].contains(x[k]) for k in self.spaces) and all(
            k in self.OPTIONAL and isinstance(x[k], self.OPTIONAL[k]) for k in extra
        )

    def __repr__(self) -> str:
        return f"MessageSpace({self.spaces['content'].max_length})"


def message_space(max_chars: int = DEFAULT_MAX_CHARS) -> MessageSpace:
    """One chat message (see :class:`MessageSpace`)."""
    return MessageSpace(max_chars)


def chat_observation_space(max_chars: int = DEFAULT_MAX_CHARS) -> spaces.Dict:
    """The conversation so far, as chat messages and as one rendered prompt string.

    ``messages`` is a tuple of ``{"role", "content"}`` dicts (a ``Sequence`` space holds tuples),
    ready for ``tokenizer.apply_chat_template(list(obs["messages"]))``; ``prompt`` renders the
    same conversation as plain text for models without a chat template.
    """
    return spaces.Dict(
        {
            "messages": spaces.Sequence(message_space(max_chars), stack=False),
            "prompt": UnicodeText(max_chars),
        }
    )
