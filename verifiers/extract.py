"""Final-answer extraction: find the one answer a response commits to, in linear time.

forkgym extracts the final answer itself before any grading library sees the text. Handing a
whole response to a grader lets it combine several candidates (``\\boxed{1} ... \\boxed{2}``
read as the set {1, 2}) or pick an intermediate number; extraction here is explicit, takes the
*last* match of a strategy, and never backtracks, so a 200 kB response costs a single scan.

Strategies are looked up by name in :data:`EXTRACTORS`; a string that is not a registered name
is compiled as a regular expression whose first group (or whole match) is the answer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from forkgym.registry import Registry

__all__ = [
    "EXTRACTORS",
    "AnswerExtractor",
    "Extraction",
    "boxed_spans",
    "last_boxed",
    "last_boxed_span",
    "register_extractor",
    "split_top_level",
]

Span = tuple[int, int]
# A strategy returns the raw answer text and its span in the response (None if the answer is
# not a substring of it), or None when it finds nothing.
Finder = Callable[[str], "tuple[str, Span | None] | None"]


def _box_argument(text: str, start: int) -> Span | None:
    """Span of the argument of a box command whose name ends at ``start``; None if malformed."""
    n = len(text)
    i = start
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return None
    if text[i] == "{":
        depth = 0
        j = i
        while j < n:
            ch = text[j]
            if ch == "\\":  # an escaped character (\{, \}, \\) never opens or closes a group
                j += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return i + 1, j
            j += 1
        return None  # unbalanced: the response was cut off inside its answer
    if i == start:  # `\boxedfoo` is a different command, not a box
        return None
    # `\boxed 5`: TeX takes a single token; accept a run up to whitespace or `$`.
    j = i
    while j < n and text[j] not in " \t\n$":
        j += 1
    return i, j


def last_boxed_span(text: str) -> Span | None:
    """Span of the contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``); None if none.

    Only the last box counts: if it is malformed (unbalanced braces, as in a truncated
    response), the answer is missing rather than silently replaced by an earlier box.
    """
    end = len(text)
    while True:
        pos, after = text.rfind("\\boxed", 0, end), 0
        fbox = text.rfind("\\fbox", pos + 1, end) if "\\fbox" in text else -1
        if fbox > pos:
            pos, after = fbox, fbox + 5
        elif pos >= 0:
            after = pos + 6
        else:
            return None
        if after < len(text) and text[after].isalpha():  # e.g. \boxedtext: keep looking left
            end = pos
            continue
        return _box_argument(text, after)


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}``; see :func:`last_boxed_span`."""
    span = last_boxed_span(text)
    return None if span is None else text[span[0] : span[1]]


def boxed_spans(text: str) -> list[Span]:
    """Spans of the contents of every well-formed ``\\boxed{...}``/``\\fbox{...}``, in order
    (one left-to-right scan; a box inside another box's argument is part of that argument, and
    nothing after a box that is never closed counts)."""
    spans: list[Span] = []
    pos = 0
    nxt = {"\\boxed": text.find("\\boxed"), "\\fbox": text.find("\\fbox")}
    while True:
        for name, at in nxt.items():  # each search resumes where it stopped: one scan in all
            if 0 <= at < pos:
                nxt[name] = text.find(name, pos)
        found = [(at, name) for name, at in nxt.items() if at >= 0]
        if not found:
            return spans
        start, name = min(found)
        span = _box_argument(text, start + len(name))
        if span is None:
            pos = start + len(name)
            while pos < len(text) and text[pos] in " \t":
                pos += 1
            if pos < len(text) and text[pos] == "{":
                return spans  # unbalanced: the rest is inside a box the response never closed
            continue
        spans.append(span)
        pos = span[1] + 1


def split_top_level(text: str) -> list[str]:
    """``text`` cut at the commas and semicolons outside any bracket: ``"2, (1, 3); x"`` ->
    ``["2", "(1, 3)", "x"]`` (how one box can hold several parts)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch in ",;" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


_GSM8K = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(r"answer is:?[ \t]*\$?([^\n$]*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_EMPHASIS = ("**", "__", "*", "_", "`")


class _spanned:
    """A finder from a span function: the answer text and its span. A class, not a closure,
    so that an extractor (and an env holding one) pickles: vector envs and forks need that."""

    def __init__(self, find_span: Callable[[str], Span | None]) -> None:
        self.find_span = find_span

    def __call__(self, text: str) -> tuple[str, Span | None] | None:
        span = self.find_span(text)
        return None if span is None else (text[span[0] : span[1]], span)


class _last_match:
    """The span of the last match of ``pattern`` (its first group, if it has one)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def __call__(self, text: str) -> Span | None:
        last = None
        for last in self.pattern.finditer(text):  # noqa: B007 - we want the final match
            pass
        if last is None:
            return None
        return last.span(1) if self.pattern.groups else last.span(0)


def _trim(text: str, start: int, end: int) -> Span:
    while start < end and text[start] in " \t":
        start += 1
    while end > start and text[end - 1] in " \t":
        end -= 1
    return start, end


def _phrase_answer(text: str, start: int, end: int) -> Span:
    """The answer in the words after "the answer is": the rest of that sentence, without
    markdown emphasis (``**42**``), a trailing remark in parentheses (``42 (6 x 7)``) or the
    closing full stop. ``3.14`` keeps its point: a sentence ends at ``.`` before a space."""
    stop = _SENTENCE_END.search(text, start, end)
    if stop is not None:
        end = stop.start()
    start, end = _trim(text, start, end)
    while end > start and text[end - 1] in ".,;:!?":
        end -= 1
    for mark in _EMPHASIS:  # **42** -> 42 (only a matched pair)
        k = len(mark)
        if end - start > 2 * k and text.startswith(mark, start) and text.startswith(mark, end - k):
            start, end = _trim(text, start + k, end - k)
            break
    if end > start and text[end - 1] == ")":  # "42 (6 x 7)": the remark goes, "(1, 2)" stays
        open_ = text.rfind(" (", start, end)
        if open_ > start:
            start, end = _trim(text, start, open_)
    return start, end


def _answer_tag_span(text: str) -> Span | None:
    """The last ``<answer>...</answer>``, found from the end (a lazy regex is quadratic). A
    box inside it is the answer; so is the phrase after "the answer is" inside it."""
    close = text.rfind("</answer>")
    if close < 0:
        return None
    open_ = text.rfind("<answer>", 0, close)
    if open_ < 0:
        return None
    start, end = open_ + len("<answer>"), close
    inner = text[start:end]
    box = last_boxed_span(inner)
    if box is not None:
        return start + box[0], start + box[1]
    phrase = _last_match(_ANSWER_IS)(inner)
    if phrase is not None:
        a, b = _phrase_answer(inner, *phrase)
        return start + a, start + b
    return _trim(text, start, end)


def _answer_is_span(text: str) -> Span | None:
    span = _last_match(_ANSWER_IS)(text)
    return None if span is None else _phrase_answer(text, *span)


def _fraction_around(text: str, start: int, end: int) -> Span | None:
    """The ``\\frac{a}{b}`` (or ``\\dfrac``, ``\\tfrac``; with a leading ``-``) whose arguments
    hold ``text[start:end]``; None if the number is not inside one."""
    cmd = text.rfind("frac", 0, start)
    if cmd < 1 or text[cmd - 1 : cmd] not in ("\\", "d", "t"):
        return None
    slash = cmd - 1 if text[cmd - 1] == "\\" else cmd - 2
    if slash < 0 or text[slash] != "\\":
        return None
    first = _box_argument(text, cmd + 4)
    if first is None or text[first[1] : first[1] + 1] != "}":
        return None
    second = _box_argument(text, first[1] + 1)
    if second is None or not (first[0] <= start and end <= second[1]):
        return None
    if first[1] < start < second[0]:  # between the two arguments: not inside
        return None
    begin = slash - 1 if slash > 0 and text[slash - 1] == "-" else slash
    return begin, second[1] + 1


def _last_number_span(text: str) -> Span | None:
    """The last number (``1,234``, ``-4.5``, ``3/4``), or the whole ``\\frac{1}{2}`` when the
    last number is one of its arguments (reading ``2`` there would grade half as two)."""
    span = _last_match(_NUMBER)(text)
    if span is None:
        return None
    return _fraction_around(text, *span) or span


EXTRACTORS: Registry[Finder] = Registry("extractor")
EXTRACTORS.register("boxed", _spanned(last_boxed_span))
EXTRACTORS.register("gsm8k", _spanned(_last_match(_GSM8K)))  # "#### 42" as in GSM8K solutions
EXTRACTORS.register("answer_tag", _spanned(_answer_tag_span))  # <answer>...</answer>
EXTRACTORS.register("answer_is", _spanned(_answer_is_span))  # "... the answer is 42."
EXTRACTORS.register("last_number", _spanned(_last_number_span))


class _UserFinder:
    """A user's ``fn(text) -> answer | None`` as a finder; the span is the answer's last
    occurrence in the text (None if it is not a substring)."""

    def __init__(self, fn: Callable[[str], str | None]) -> None:
        self.fn = fn

    def __call__(self, text: str) -> tuple[str, Span | None] | None:
        found = self.fn(text)
        if found is None:
            return None
        start = text.rfind(found)
        return found, ((start, start + len(found)) if start >= 0 else None)


def register_extractor(name: str, fn: Callable[[str], str | None]) -> None:
    """Add a named strategy usable in ``AnswerExtractor(patterns=[name])``.

    ``fn`` returns the answer text or None. When the answer is a substring of the response,
    its last occurrence is reported as the span; otherwise the span is None.
    """

    EXTRACTORS.register(name, _UserFinder(fn))


@dataclass(frozen=True)
class Extraction:
    """What extraction found: the answer (None if nothing) and which strategy found it."""

    answer: str | None
    strategy: str | None
    reason: str | None = None  # why nothing usable was found: "no_answer" or "empty_answer"
    span: Span | None = None  # where the raw answer sits in the response


class AnswerExtractor:
    """Tries strategies in order; the first that yields a non-empty answer wins.

    ``patterns`` holds names from :data:`EXTRACTORS` or regular expressions (strings that are
    not registered names, or compiled patterns); a bare word that is not a registered name is
    refused as a likely typo (``boxd``), with the closest name. The default is the last
    ``\\boxed{}``.
    """

    def __init__(self, patterns: Iterable[str | re.Pattern[str]] = ("boxed",)) -> None:
        self.names: list[str] = []
        self._fns: list[Finder] = []
        for pattern in patterns:
            if isinstance(pattern, re.Pattern):
                self.names.append(pattern.pattern)
                self._fns.append(_spanned(_last_match(pattern)))
            elif pattern in EXTRACTORS:
                self.names.append(pattern)
                self._fns.append(EXTRACTORS[pattern])
            elif re.fullmatch(r"[A-Za-z_]\w*", pattern):
                # a bare word is a misspelt strategy far more often than a regex
                close = difflib.get_close_matches(pattern, sorted(EXTRACTORS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"unknown extractor {pattern!r}{hint} Registered: "
                    f"{', '.join(sorted(EXTRACTORS))}. A regular expression that is a bare "
                    f"word needs a group: ({pattern})"
                )
            else:
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise ValueError(
                        f"{pattern!r} is neither a registered extractor "
                        f"({', '.join(sorted(EXTRACTORS))}) nor a valid regex: {exc}"
                    ) from exc
                self.names.append(pattern)
                self._fns.append(_spanned(_last_match(compiled)))
        if not self._fns:
            raise ValueError("at least one extraction pattern is required")

    def __call__(self, text: str) -> Extraction:
        saw_empty = False
        for name, find in zip(self.names, self._fns, strict=True):
            result = find(text)
            if result is None:
                continue
            found = strip_math_delimiters(result[0])
            if found:
                return Extraction(found, name, span=result[1])
            saw_empty = True
        return Extraction(None, None, "empty_answer" if saw_empty else "no_answer")


def strip_math_delimiters(answer: str) -> str:
    """Trim whitespace and one pair of enclosing ``$...$``/``\\(...\\)``/``\\[...\\]``."""
    s = answer.strip()
    if not s or s[0] not in "$\\":
        return s
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            s = s[len(left) : len(s) - len(right)].strip()
            break
    return s
