"""Final-answer extraction: find the one answer a response commits to, in linear time.

forkgym extracts the final answer itself before any grading library sees the text. Handing a
whole response to a grader lets it pick an intermediate number or read prose as math;
extraction here is explicit, takes the *last* match of a strategy, and never backtracks, so a
200 kB response costs a single scan.

Strategies are looked up by name in :data:`EXTRACTORS`; a string that is not a registered name
is compiled as a regular expression whose first group (or whole match) is the answer. Named
chains of strategies for common datasets and model families are in
:mod:`~forkgym.verifiers.presets`.

Whatever the strategies, a response whose last answer-shaped span is cut off (a ``\\boxed{``
that never closes, an ``<answer>`` with no ``</answer>`` after it) has no answer: a fallback
strategy never reads a number out of a truncated box.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from forkgym.registry import Registry

from .boxes import (
    box_argument,
    box_chain,
    boxed_spans,
    has_unclosed_box,
    last_boxed,
    last_boxed_span,
)

__all__ = [
    "EXTRACTORS",
    "AnswerExtractor",
    "Extraction",
    "Found",
    "boxed_answer",
    "boxed_spans",
    "closing_sentence",
    "final_boxes",
    "last_boxed",
    "last_boxed_span",
    "read_found",
    "read_math",
    "register_extractor",
    "split_top_level",
    "strip_math_delimiters",
]

Span = tuple[int, int]


class Found(NamedTuple):
    """What one strategy found: the raw answer text, its span in the response (None when it
    is not a substring of it), and, for a list answer written in several boxes, their
    contents (``items``; the text is then those contents joined with ``,``)."""

    text: str
    span: Span | None
    items: tuple[str, ...] | None = None
    boxed: bool = False  # the text is a box's content, read already (delimiters stripped)
    raw: bool = False  # the whole response, for math-verify's own extraction (``prose``)


# A strategy returns what it found, or None when it finds nothing.
Finder = Callable[[str], "Found | None"]


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

    def __call__(self, text: str) -> Found | None:
        span = self.find_span(text)
        return None if span is None else Found(text[span[0] : span[1]], span)


def final_boxes(text: str, chain: bool = True, offset: int = 0) -> Found | None:
    """The final answer's boxes in ``text``: the chain of boxes ending at the last one (see
    :mod:`~forkgym.verifiers.boxes`), or the last box alone (``chain=False``). Repeated
    neighbours collapse (``\\boxed{4} and \\boxed{4}`` is 4); an empty box ends the chain."""
    if chain:
        spans = box_chain(text)
    else:
        last = last_boxed_span(text)
        spans = None if last is None else [last]
    if not spans:
        return None
    if len(spans) == 1:  # the common case
        a, b = spans[0]
        return Found(strip_math_delimiters(text[a:b]), (offset + a, offset + b), boxed=True)
    items: list[str] = []
    first = spans[-1]
    for a, b in reversed(spans):
        item = strip_math_delimiters(text[a:b])
        if not item and items:
            break  # an empty box is not part of the list
        if not items or items[-1] != item:
            items.append(item)
        first = (a, b)
        if not item:
            break
    items.reverse()
    span = (offset + first[0], offset + spans[-1][1])
    if len(items) == 1:
        return Found(items[0], span, boxed=True)
    return Found(",".join(items), span, tuple(items), boxed=True)


_HOPE = "I hope"
# what math-verify reads as a plain answer in that sentence: a number or an arithmetic
# expression starting with a digit, a minus sign or a bracket (not "+"), or a simple fraction
_CLOSING_PLAIN = re.compile(
    r"(?:\*\*)?(?:-?\(?-?[\d.][\d.,\s+\-*×/^()÷]*(?:\s*(?:%|[Pp]ercent))?"
    r"|-?\\frac\{-?\d+(?:[.,]\d+)?\}\{-?\d+(?:[.,]\d+)?\})(?:\*\*)?"
)
_CLOSING_WINDOW = 400  # how far before "I hope" its sentence may start


def closing_sentence(text: str, start: int = 0) -> Found | None:
    """Minerva's closing sentence after ``start``: ``The final answer is X. I hope it is
    correct.`` (at most a full stop and one space between X and "I hope"); X and its span,
    else None. Found from the end of the text within a bounded window: a linear search."""
    hope = text.rfind(_HOPE, start)
    if hope < 0:
        return None
    lo = max(start, hope - _CLOSING_WINDOW)
    at = text[lo:hope].lower().rfind("final answer is")
    if at < 0:
        return None
    at += lo
    a, b = at + len("final answer is"), hope
    if text[a : a + 1] == ":":
        a += 1
    while a < b and text[a].isspace():
        a += 1
    if b > a and text[b - 1].isspace():
        b -= 1
    if b > a and text[b - 1] == ".":
        b -= 1
    if b <= a or text[b - 1].isspace():
        return None
    stated = text[a:b]
    in_math = read_math(stated)
    if in_math[1] is None and in_math[0] == stated and not _CLOSING_PLAIN.fullmatch(stated):
        return None  # neither math nor a plain number: math-verify reads the boxes then
    return Found(stated, (a, b))


def boxed_answer(text: str, chain: bool = True) -> Found | None:
    """What the ``boxed`` strategy finds: the last box with the boxes that belong to it
    (``chain=False``: the last box alone), or Minerva's closing sentence after it.

    That sentence (``The final answer is $X$. I hope it is correct.``) ranks with a box, as in
    math-verify: when it comes after the last box (or there is none), X is the final answer.
    Few-shot MATH prompts end every solution so, boxing intermediate results."""
    boxed = final_boxes(text, chain)
    if _HOPE in text:
        closing = closing_sentence(text, 0 if boxed is None else boxed.span[1])
        if closing is not None:
            return closing
    if boxed is not None and boxed.span is not None and boxed.items is None:
        return restated_answer(text, boxed) or boxed
    return boxed


def restated_answer(text: str, boxed: Found) -> Found | None:
    """The last stated answer governs: after a box holding a plain number, a later "the answer
    is N" with a different plain number N ("so $\\boxed{12}$ ... actually 13, so the answer is
    13") is the answer, not the box. Only plain numbers on both sides are compared (as written,
    without thousands separators), so prose that restates the box in other words, or names a
    unit, never displaces it."""
    end = boxed.span[1]  # type: ignore[index]
    phrase = _last_match(_ANSWER_IS)(text[end:])
    if phrase is None:
        return None
    a, b = _phrase_answer(text, end + phrase[0], end + phrase[1])
    later = text[a:b].strip("$ ")
    if not (_NUMBER.fullmatch(later) and _NUMBER.fullmatch(boxed.text.strip())):
        return None
    if later.replace(",", "") == boxed.text.strip().replace(",", ""):
        return None
    return Found(later, (a, a + len(later)) if text[a:b].startswith(later) else None)


class _boxed:
    """The ``boxed`` strategy (see :func:`boxed_answer`)."""

    def __init__(self, chain: bool = True) -> None:
        self.chain = chain

    def __call__(self, text: str) -> Found | None:
        return boxed_answer(text, self.chain)


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


class _answer_tag:
    """The last ``<answer>...</answer>``, found from the end (a lazy regex is quadratic). A
    box inside it is the answer (with the boxes chained to it, ``chain=True``); so is the
    phrase after "the answer is" inside it."""

    def __init__(self, chain: bool = True) -> None:
        self.chain = chain

    def __call__(self, text: str) -> Found | None:
        close = text.rfind("</answer>")
        if close < 0:
            return None
        open_ = text.rfind("<answer>", 0, close)
        if open_ < 0:
            return None
        start, end = open_ + len("<answer>"), close
        inner = text[start:end]
        boxed = final_boxes(inner, self.chain, offset=start)
        if boxed is not None:
            return boxed
        phrase = _last_match(_ANSWER_IS)(inner)
        if phrase is not None:
            a, b = _phrase_answer(inner, *phrase)
            span = (start + a, start + b)
        else:
            span = _trim(text, start, end)
        return Found(text[span[0] : span[1]], span)


def _answer_is_span(text: str) -> Span | None:
    span = _last_match(_ANSWER_IS)(text)
    return None if span is None else _phrase_answer(text, *span)


_MINERVA = "Final Answer: The final answer is"


def _minerva_span(text: str) -> Span | None:
    """Minerva's closing line, ``Final Answer: The final answer is $X$. I hope it is correct.``:
    X, up to "I hope it is correct" or the end of that line, without the closing full stop."""
    at = text.rfind(_MINERVA)
    if at < 0:
        return None
    start = at + len(_MINERVA)
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    hope = text.find("I hope it is correct", start, end)
    if hope >= 0:
        end = hope
    start, end = _trim(text, start, end)
    while end > start and text[end - 1] in ". \t":
        end -= 1
    return (start, end) if end > start else None


def _fraction_around(text: str, start: int, end: int) -> Span | None:
    """The ``\\frac{a}{b}`` (or ``\\dfrac``, ``\\tfrac``; with a leading ``-``) whose arguments
    hold ``text[start:end]``; None if the number is not inside one."""
    cmd = text.rfind("frac", 0, start)
    if cmd < 1 or text[cmd - 1 : cmd] not in ("\\", "d", "t"):
        return None
    slash = cmd - 1 if text[cmd - 1] == "\\" else cmd - 2
    if slash < 0 or text[slash] != "\\":
        return None
    first = box_argument(text, cmd + 4)
    if first is None or text[first[1] : first[1] + 1] != "}":
        return None
    second = box_argument(text, first[1] + 1)
    if second is None or not (first[0] <= start and end <= second[1]):
        return None
    if first[1] < start < second[0]:  # between the two arguments: not inside
        return None
    begin = slash - 1 if slash > 0 and text[slash - 1] == "-" else slash
    return begin, second[1] + 1


def _prose(text: str) -> Found | None:
    """The ``prose`` strategy: the whole response, handed to math-verify as written, so that
    its own extraction finds the answer in prose ("Answer $9$", "The solution is $x \\neq
    5$"), as it does for a user moving from math-verify."""
    stripped = text.strip()
    if not stripped:
        return None
    start = text.index(stripped)
    return Found(stripped, (start, start + len(stripped)), raw=True)


def _last_number_span(text: str) -> Span | None:
    """The last number (``1,234``, ``-4.5``, ``3/4``), or the whole ``\\frac{1}{2}`` when the
    last number is one of its arguments (reading ``2`` there would grade half as two)."""
    span = _last_match(_NUMBER)(text)
    if span is None:
        return None
    return _fraction_around(text, *span) or span


EXTRACTORS: Registry[Finder] = Registry("extractor")
EXTRACTORS.register("boxed", _boxed())  # the last \\boxed{} (and the boxes chained to it)
EXTRACTORS.register("gsm8k", _spanned(_last_match(_GSM8K)))  # "#### 42" as in GSM8K solutions
EXTRACTORS.register("answer_tag", _answer_tag())  # <answer>...</answer>
EXTRACTORS.register("answer_is", _spanned(_answer_is_span))  # "... the answer is 42."
EXTRACTORS.register("minerva", _spanned(_minerva_span))  # "Final Answer: The final answer is"
EXTRACTORS.register("last_number", _spanned(_last_number_span))
EXTRACTORS.register("prose", _prose)  # the whole response, read by math-verify's extraction
# the same strategies reading one box only (MathVerifier(multi_box="last"))
_LAST_BOX_ONLY: dict[str, Finder] = {"boxed": _boxed(chain=False), "answer_tag": _answer_tag(chain=False)}  # fmt: skip


class _UserFinder:
    """A user's ``fn(text) -> answer | None`` as a finder; the span is the answer's last
    occurrence in the text (None if it is not a substring)."""

    def __init__(self, fn: Callable[[str], str | None]) -> None:
        self.fn = fn

    def __call__(self, text: str) -> Found | None:
        found = self.fn(text)
        if found is None:
            return None
        start = text.rfind(found)
        return Found(found, (start, start + len(found)) if start >= 0 else None)


def register_extractor(name: str, fn: Callable[[str], str | None]) -> None:
    """Add a named strategy usable in ``AnswerExtractor(patterns=[name])``.

    ``fn`` returns the answer text or None. When the answer is a substring of the response,
    its last occurrence is reported as the span; otherwise the span is None.
    """

    EXTRACTORS.register(name, _UserFinder(fn))


class Extraction(NamedTuple):
    """What extraction found: the answer (None if nothing) and which strategy found it.

    ``items`` holds the elements of a list answer written in several boxes or math spans
    (``\\boxed{1}, \\boxed{2}``; ``answer`` is then ``"1,2"``). ``plain`` says the answer was
    written as plain text, outside any box or math delimiters: ``1,22`` there is the decimal
    1.22 and ``1 000`` is 1000, as math-verify reads plain text, while ``$1,22$`` is a list.
    """

    answer: str | None
    strategy: str | None
    # why nothing usable was found: "no_answer", "empty_answer", "unclosed_answer" (the last
    # box or <answer> tag is cut off) or "unclosed_think" (a <think> block never closed)
    reason: str | None = None
    span: Span | None = None  # where the raw answer sits in the response
    items: tuple[str, ...] | None = None
    plain: bool = False
    raw: bool = False  # the response as written: math-verify finds the answer in it


@dataclass(frozen=True)
class Attempt:
    """One strategy's try on a response (see :meth:`AnswerExtractor.explain`): what it found
    (None: nothing; ``""``: an empty answer), where, and whether it was the one graded."""

    strategy: str
    answer: str | None
    span: Span | None = None
    items: tuple[str, ...] | None = None
    plain: bool = False
    chosen: bool = False


_MATH_OPENERS = ("$", "\\(", "\\[", "\\boxed{", "\\fbox{", "\\boxed", "\\fbox")


class AnswerExtractor:
    """Tries strategies in order; the first that yields a non-empty answer wins.

    ``patterns`` holds names from :data:`EXTRACTORS` or regular expressions (strings that are
    not registered names, or compiled patterns); a bare word that is not a registered name is
    refused as a likely typo (``boxd``), with the closest name. The default is the last
    ``\\boxed{}`` with the boxes chained to it (``chain_boxes=False``: the last box alone).

    Before any strategy runs, a response whose last box or ``<answer>`` tag is cut off has no
    answer (``reason="unclosed_answer"``), so no fallback reads a number out of it. With
    ``after_think=True`` only the text after the last ``</think>`` is searched, and a
    ``<think>`` that never closes means no answer (``reason="unclosed_think"``).
    """

    def __init__(
        self,
        patterns: Iterable[str | re.Pattern[str]] = ("boxed",),
        *,
        chain_boxes: bool = True,
        after_think: bool = False,
        preset: str | None = None,
    ) -> None:
        self.names: list[str] = []
        self.preset = preset  # the preset this chain comes from, if any
        self._fns: list[Finder] = []
        self.chain_boxes = chain_boxes
        self.after_think = after_think
        for pattern in patterns:
            if isinstance(pattern, re.Pattern):
                self.names.append(pattern.pattern)
                self._fns.append(_spanned(_last_match(pattern)))
            elif pattern in EXTRACTORS:
                self.names.append(pattern)
                only_last = None if chain_boxes else _LAST_BOX_ONLY.get(pattern)
                self._fns.append(only_last or EXTRACTORS[pattern])
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

    def describe(self) -> str:
        """The strategies in order, as the verifier's version string names them:
        ``boxed,answer_is``, or ``r1=think>answer_tag,boxed`` for a preset."""
        chain = ("think>" if self.after_think else "") + ",".join(self.names)
        return chain if self.preset is None else f"{self.preset}={chain}"

    def scope(self, text: str) -> tuple[str, int, str | None]:
        """The part of ``text`` that strategies search, its offset in ``text``, and why the
        response has no answer whatever the strategies (None when it may have one)."""
        offset = 0
        if self.after_think:
            close = text.rfind("</think>")
            if text.rfind("<think>") > close:
                return text, 0, "unclosed_think"
            if close >= 0:
                offset = close + len("</think>")
                text = text[offset:]
        if has_unclosed_box(text) or (
            "<answer>" in text and text.rfind("<answer>") > text.rfind("</answer>")
        ):
            return text, offset, "unclosed_answer"
        return text, offset, None

    def _attempt(self, name: str, find: Finder, text: str, offset: int) -> Attempt:
        result = find(text)
        if result is None:
            return Attempt(name, None)
        answer, items, plain = read_found(text, result)
        span = result.span
        if span is not None and offset:
            span = (span[0] + offset, span[1] + offset)
        return Attempt(name, answer, span, items, plain)

    def __call__(self, text: str) -> Extraction:
        scope, offset, reason = self.scope(text)
        if reason is not None:
            return Extraction(None, None, reason)
        saw_empty = False
        for name, find in zip(self.names, self._fns, strict=True):
            found = find(scope)
            if found is None:
                continue
            answer, items, plain = read_found(scope, found)
            if answer:
                span = found.span
                if span is not None and offset:
                    span = (span[0] + offset, span[1] + offset)
                return Extraction(answer, name, span=span, items=items, plain=plain, raw=found.raw)
            saw_empty = True
        return Extraction(None, None, "empty_answer" if saw_empty else "no_answer")

    def explain(self, text: str) -> tuple[Extraction, list[Attempt], str | None]:
        """What every strategy finds in ``text`` (not only the first that succeeds): the
        extraction, each strategy's attempt in order (the graded one marked ``chosen``), and
        why the response has no answer before any strategy ran (or None)."""
        extraction = self(text)
        scope, offset, reason = self.scope(text)
        if reason is not None:
            return extraction, [], reason
        attempts = []
        for name, find in zip(self.names, self._fns, strict=True):
            attempt = self._attempt(name, find, scope, offset)
            chosen = name == extraction.strategy and attempt.answer == extraction.answer
            if chosen and any(a.chosen for a in attempts):
                chosen = False
            attempts.append(Attempt(**{**attempt.__dict__, "chosen": chosen}))
        return extraction, attempts, None


def read_found(text: str, found: Found) -> tuple[str, tuple[str, ...] | None, bool]:
    """What a strategy found in ``text``, read: the answer without math delimiters, a list's
    items, and whether it is written as plain text (outside boxes and math delimiters)."""
    if found.boxed or found.items is not None or found.raw:
        return found.text, found.items, False
    answer, items = read_math(found.text)
    plain = items is None and answer == found.text.strip()
    if plain and found.span is not None:
        before = text[max(0, found.span[0] - 8) : found.span[0]].rstrip(" \t")
        plain = not before.endswith(_MATH_OPENERS)
    return answer, items, plain


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


# Several math spans joined only by "and", "or" or a comma are one list answer
# ("$1$ and $2$"), as math-verify 0.9 reads up to six of them.
_MATH_SPAN = re.compile(
    r"\$\$((?:\\.|[^$\\])+?)\$\$|\$((?:\\.|[^$\\])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL
)
_SPAN_JOIN = re.compile(r"\s*(?:,|,?and|,?or)\s*")
MAX_MATH_SPANS = 6
_MAX_SPAN_SCAN = 2000  # longer texts are not split into math spans (the scan is bounded)


def read_math(answer: str) -> tuple[str, tuple[str, ...] | None]:
    """An answer text without its math delimiters: ``$5$`` -> ``5``; two to six math spans
    joined only by "and", "or" or a comma -> their contents joined with ``,`` and the contents
    as ``items`` (``$1$ and $2$`` -> ``"1,2"``); anything else as
    :func:`strip_math_delimiters` leaves it."""
    s = answer.strip()
    several = s.count("$") >= 4 or "\\(" in s or "\\[" in s
    if len(s) < 2 or s[0] not in "$\\" or len(s) > _MAX_SPAN_SCAN or not several:
        return strip_math_delimiters(s), None
    contents: list[str] = []
    pos = 0
    for match in _MATH_SPAN.finditer(s):
        gap = s[pos : match.start()]
        if gap.strip() if pos == 0 else not _SPAN_JOIN.fullmatch(gap):
            break
        contents.append(next(g for g in match.groups() if g is not None).strip())
        pos = match.end()
        if len(contents) > MAX_MATH_SPANS:
            break
    if pos != len(s) or not 2 <= len(contents) <= MAX_MATH_SPANS or not all(contents):
        return strip_math_delimiters(s), None
    return ",".join(contents), tuple(contents)
