"""Spaces that really contain what a text environment emits.

``gymnasium.spaces.Text`` checks every character against its charset, which defaults to
``[a-zA-Z0-9]``: ``"What is 2+2?"`` is not in ``Text(64)``. Listing all of Unicode as a charset
would cost a 1.1M-element set per space. :class:`UnicodeText` contains *any* Python string within
its length bounds and samples from a printable subset (ASCII plus some Greek, maths symbols and
CJK), which is enough for Gymnasium's checker and for fuzzing an environment with random actions.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import pickle
import string
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gymnasium import spaces
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = [
    "DEFAULT_MAX_CHARS",
    "ChatObservation",
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


class ChatObservation(spaces.Dict):
    """``{"messages": Sequence(MessageSpace), "prompt": UnicodeText}``, the observation of every
    forkgym environment; its own type so that Gymnasium's async vector env can pass it through
    shared memory (registered below)."""

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS, seed: Any = None) -> None:
        self.max_chars = max_chars
        super().__init__(
            {
                "messages": spaces.Sequence(message_space(max_chars), stack=False),
                "prompt": UnicodeText(max_chars),
            },
            seed=seed,
        )

    @property
    def slot_bytes(self) -> int:
        """Shared-memory bytes per environment: the prompt and the messages it renders, at up
        to 4 UTF-8 bytes a character, plus room for message keys and pickling."""
        return 8 * self.max_chars + (1 << 16)


def chat_observation_space(max_chars: int = DEFAULT_MAX_CHARS) -> ChatObservation:
    """The conversation so far, as chat messages and as one rendered prompt string.

    ``messages`` is a tuple of message dicts (a ``Sequence`` space holds tuples), ready for
    ``tokenizer.apply_chat_template(list(obs["messages"]))``; ``prompt`` renders the same
    conversation as plain text for models without a chat template.
    """
    return ChatObservation(max_chars)


# -- shared memory for AsyncVectorEnv ------------------------------------------------------------
# Gymnasium shares observations between its worker processes and the main one through
# fixed-size buffers, and refuses variable-length spaces (Text, Sequence) unless the user passes
# `vector_kwargs={"shared_memory": False}`. A chat observation goes through one byte slot per
# environment instead: the worker pickles it (strings are stored as their UTF-8 bytes, so
# nothing the model wrote is interpreted), the main process unpickles it when read.


class _SharedChatBatch(Mapping[str, Any]):
    """The vector env's observations, read from the slots when accessed (Gymnasium reads shared
    memory once and returns the same object every step, copying it unless ``copy=False``)."""

    def __init__(self, buffer: Any, n: int, slot: int) -> None:
        self._buffer, self._n, self._slot = buffer, n, slot

    def _decode(self) -> dict[str, tuple[Any, ...]]:
        raw = memoryview(self._buffer.get_obj()).cast("B")
        rows = []
        for i in range(self._n):
            start = i * self._slot
            size = int.from_bytes(raw[start : start + 8], "little")
            rows.append(pickle.loads(raw[start + 8 : start + 8 + size]) if size else ((), ""))
        return {
            "messages": tuple(messages for messages, _ in rows),
            "prompt": tuple(prompt for _, prompt in rows),
        }

    def __getitem__(self, key: str) -> tuple[Any, ...]:
        return self._decode()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("messages", "prompt"))

    def __len__(self) -> int:
        return 2

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, tuple[Any, ...]]:
        return self._decode()

    def __repr__(self) -> str:
        return repr(self._decode())


@create_shared_memory.register(ChatObservation)
def _create_chat_memory(space: ChatObservation, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array(ctypes.c_uint8, n * space.slot_bytes)


@read_from_shared_memory.register(ChatObservation)
def _read_chat_memory(space: ChatObservation, shared_memory: Any, n: int = 1) -> Any:
    return _SharedChatBatch(shared_memory, n, space.slot_bytes)


@write_to_shared_memory.register(ChatObservation)
def _write_chat_memory(
    space: ChatObservation, index: int, value: dict[str, Any], shared_memory: Any
) -> None:
    blob = pickle.dumps((tuple(value["messages"]), value["prompt"]), protocol=5)
    slot = space.slot_bytes
    if len(blob) + 8 > slot:
        raise ValueError(
            f"an observation of {len(blob):,} bytes does not fit the {slot:,}-byte shared-memory "
            f"slot of an env with max_chars={space.max_chars:,}: raise max_chars, or pass "
            "vector_kwargs={'shared_memory': False}"
        )
    raw = memoryview(shared_memory.get_obj()).cast("B")
    start = index * slot
    raw[start + 8 : start + 8 + len(blob)] = blob
    raw[start : start + 8] = len(blob).to_bytes(8, "little")
