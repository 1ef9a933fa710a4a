"""Finding ``\\boxed{...}`` (and ``\\fbox{...}``) answers in a text, in linear time.

A box's argument is read as TeX reads it: balanced braces, with escaped braces (``\\{``,
``\\}``) inside it, or the single token after ``\\boxed `` without braces. A box whose braces
never close (a response cut off inside its answer) is *unclosed*: it is never an answer, and
nothing before it stands in for it.

The final answer of a text is its last box together with the boxes that belong to it, read as
math-verify 0.9 reads several boxes so that a list answer written box by box is graded as the
list:

* when the last box sits in a math environment (``$...$``, ``$$...$$``, ``\\(...\\)``,
  ``\\[...\\]``) that ends the text's braces, every box of that environment belongs to it,
  and so do the boxes of the environments joined to it by only a comma, "and" or "or"
  (``$\\boxed{1}$ and $\\boxed{2}$`` is the list 1, 2; ``so $x = \\boxed{3}$, hence
  $y = \\boxed{4}$`` is 4);
* otherwise the boxes *chained* to it do: walking left from the last box, an earlier box joins
  when the text between the two is short (fewer than 10 characters of anything, or fewer than
  70 holding "and", "or", a comma or a semicolon between two different answers):
  ``\\boxed{1}, \\boxed{2}`` is the list 1, 2 and ``\\boxed{1} ... a long remark ...
  \\boxed{2}`` is 2.
"""

from __future__ import annotations

import re

__all__ = [
    "box_argument",
    "box_chain",
    "boxed_spans",
    "has_unclosed_box",
    "last_boxed",
    "last_boxed_span",
    "unclosed_box_content",
]

Span = tuple[int, int]

# the chaining rule (thresholds as in math-verify 0.9's reading of several boxes)
CHAIN_ANY_GAP = 10  # boxes closer than this are always one list
CHAIN_JOINED_GAP = 70  # boxes closer than this are one list when a joining word separates them
_JOINER = re.compile(r"\b(?:and|or)\b|[,;]")
_COMMANDS = ("\\boxed", "\\fbox")


def box_argument(text: str, start: int) -> Span | None:
    """Span of the argument of a box command whose name ends at ``start``; None if malformed."""
    n = len(text)
    i = start
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] in "\r\n":  # `\boxed` at a line end: its braces may open below
        k = i
        while k < n and text[k].isspace():
            k += 1
        if k < n and text[k] == "{":
            i = k
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
        return None  # unbalanced: the text was cut off inside its answer
    if i == start:  # `\boxedfoo` is a different command, not a box
        return None
    # `\boxed 5`: TeX takes a single token; accept a run up to whitespace or `$`.
    j = i
    while j < n and text[j] not in " \t\n$":
        j += 1
    return i, j


# The last box of the last text asked about: extraction asks twice (is it cut off? what does
# it hold?). One immutable entry, replaced whole, so threads never see a torn pair.
_LAST: tuple[str, tuple[bool, tuple[int, Span | None] | None]] = ("", (False, None))


def _final_box(text: str) -> tuple[bool, tuple[int, Span | None] | None]:
    """Whether ``text`` has ``\\fbox``, and its last box command (see :func:`_last_box`)."""
    global _LAST
    memo = _LAST
    if memo[0] is text:
        return memo[1]
    has_fbox = "\\fbox" in text
    found = (has_fbox, _find_last_box(text, len(text), has_fbox))
    _LAST = (text, found)
    return found


def _last_box(text: str, end: int, has_fbox: bool) -> tuple[int, Span | None] | None:
    """The last box command starting before ``end``: (its position, its argument's span, or
    None when the argument is malformed); None when there is no box command before ``end``."""
    if end == len(text):
        return _final_box(text)[1]
    return _find_last_box(text, end, has_fbox)


def _find_last_box(text: str, end: int, has_fbox: bool) -> tuple[int, Span | None] | None:
    while True:
        pos = text.rfind("\\boxed", 0, end)
        fbox = text.rfind("\\fbox", pos + 1, end) if has_fbox else -1
        if fbox > pos:
            pos, after = fbox, fbox + 5
        elif pos >= 0:
            after = pos + 6
        else:
            return None
        if after < len(text) and text[after].isalpha():  # e.g. \boxedtext: keep looking left
            end = pos
            continue
        return pos, box_argument(text, after)


def last_boxed_span(text: str) -> Span | None:
    """Span of the contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``); None if none.

    Only the last box counts: if it is malformed (unbalanced braces, as in a truncated
    response), the answer is missing rather than silently replaced by an earlier box.
    """
    found = _final_box(text)[1]
    return None if found is None else found[1]


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}``; see :func:`last_boxed_span`."""
    span = last_boxed_span(text)
    return None if span is None else text[span[0] : span[1]]


def _cut_off(text: str) -> str | None:
    """What follows the last box command when that box is cut off (``\\boxed`` at the end,
    or a ``\\boxed{`` whose braces never close), else None."""
    found = _final_box(text)[1]
    if found is None or found[1] is not None:
        return None
    pos = found[0]
    rest = text[pos + (6 if text.startswith("\\boxed", pos) else 5) :].lstrip()
    return rest if not rest or rest.startswith("{") else None


def has_unclosed_box(text: str) -> bool:
    """True when the text's last box is cut off: ``\\boxed`` at the very end, or a
    ``\\boxed{`` whose braces never close (a response that ran out of tokens in its answer)."""
    return _cut_off(text) is not None


def unclosed_box_content(text: str) -> str | None:
    """The content the last box was cut off with (what follows its opening brace), when that
    box never closes; else None. For references, which are trusted text."""
    rest = _cut_off(text)
    return rest[1:] if rest else None


Env = tuple[int, int, int, int]  # opener start, content start, content end, closer end
_SINGLE_DOLLAR = re.compile(r"(?<![\\$])\$(?!\$)")  # a `$` that is not escaped nor in `$$`
_ENV_JOIN = re.compile(r"\s*(?:,?and|,?or|,)\s*")
MAX_JOINED_ENVS = 6  # math-verify joins at most six environments into one answer


def _paired(text: str, left: str, right: str, pos: int, end: int, inline: bool) -> Env | None:
    """The ``left ... right`` environment around ``text[pos:end]``: the nearest opener before
    it with no closer between, the nearest closer after it with no opener between; an inline
    one stays on one line."""
    lo = text.rfind(left, 0, pos)
    if lo < 0 or text.find(right, lo + len(left), pos) >= 0:
        return None
    hi = text.find(right, end)
    if hi < 0 or text.find(left, end, hi) >= 0:
        return None
    if inline and "\n" in text[lo:hi]:
        return None
    return lo, lo + len(left), hi, hi + len(right)


def _dollars(text: str, pos: int, end: int) -> Env | None:
    """The ``$$...$$`` or ``$...$`` around ``text[pos:end]``, dollars paired left to right
    (``$$`` pairs counted over the text, single ``$`` over the line, as inline math does not
    cross a line end); escaped ``\\$`` is not a delimiter."""
    if "$$" in text:
        lo, hi = text.rfind("$$", 0, pos), text.find("$$", end)
        if lo >= 0 and hi >= 0 and text.count("$$", 0, lo) % 2 == 0:
            return lo, lo + 2, hi, hi + 2
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    lo, hi = text.rfind("$", line_start, pos), text.find("$", end, line_end)
    if lo < 0 or hi < 0:
        return None
    if _single(text, lo) and _single(text, hi):  # the common case: counted in C
        before = (
            text.count("$", line_start, lo)
            - 2 * text.count("$$", line_start, lo)
            - text.count("\\$", line_start, lo)
        )
        return (lo, lo + 1, hi, hi + 1) if before % 2 == 0 else None
    singles = [m.start() for m in _SINGLE_DOLLAR.finditer(text, line_start, line_end)]
    before_box = [i for i in singles if i < pos]
    after_box = [i for i in singles if i >= end]
    if not before_box or not after_box or len(before_box) % 2 == 0:
        return None
    return before_box[-1], before_box[-1] + 1, after_box[0], after_box[0] + 1


def _single(text: str, i: int) -> bool:
    """``text[i]`` is a ``$`` that is neither escaped nor half of ``$$``."""
    return text[i - 1 : i] not in ("\\", "$") and text[i + 1 : i + 2] != "$"


def _env_of(text: str, pos: int, end: int) -> Env | None:
    """The math environment holding the box command at ``pos`` whose argument ends at
    ``end``, the outermost when several do (math-verify matches the leftmost); None if none."""
    found = [
        env
        for env in (
            _dollars(text, pos, end) if "$" in text else None,
            _paired(text, "\\[", "\\]", pos, end, inline=False) if "\\[" in text else None,
            _paired(text, "\\(", "\\)", pos, end, inline=True) if "\\(" in text else None,
        )
        if env is not None
    ]
    return min(found) if found else None


def _environment_boxes(text: str, pos: int, span: Span, has_fbox: bool) -> list[Span] | None:
    """The boxes of the math environment holding the last box (at ``pos``) and of the
    environments joined to it by a comma, "and" or "or", when that environment is the text's
    final statement (no brace follows it: math-verify then reads the environment, else the
    box chain); None when the last box is in no such environment."""
    env = _env_of(text, pos, span[1])
    if env is None or text.find("}", env[3]) >= 0:
        return None
    envs = [env]
    while len(envs) < MAX_JOINED_ENVS:
        found = _last_box(text, envs[0][0], has_fbox)
        if found is None or found[1] is None:
            break
        prev = _env_of(text, found[0], found[1][1])
        if prev is None or prev[3] > envs[0][0] or not _ENV_JOIN.fullmatch(text, prev[3], envs[0][0]):  # fmt: skip
            break
        envs.insert(0, prev)
    return [(e[1] + a, e[1] + b) for e in envs for a, b in boxed_spans(text[e[1] : e[2]])]


def box_chain(text: str) -> list[Span] | None:
    """The spans of the final answer's boxes, in order: the last box and the boxes that
    belong to it (see the module docstring); None when the text has no box or its last box is
    malformed. Repeated boxes (``\\boxed{4} so \\boxed{4}``) are all returned; callers
    collapse them."""
    has_fbox, found = _final_box(text)
    if found is None or found[1] is None:
        return None
    pos, span = found
    if text.find("\\boxed") in (pos, -1) and (not has_fbox or text.find("\\fbox") == pos):
        return [span]  # the only box (the common case): nothing can join it
    in_env = _environment_boxes(text, pos, span, has_fbox)
    if in_env is not None and in_env[-1] == span:
        return in_env
    chain = [span]
    if text[span[1] : span[1] + 1] != "}":  # `\\boxed 5`: a single token never chains
        return chain
    later = text[span[0] : span[1]].strip()
    while True:
        found = _last_box(text, pos, has_fbox)
        if found is None or found[1] is None:
            break
        prev_pos, prev = found
        if text[prev[1] : prev[1] + 1] != "}" or prev[1] >= pos:  # unbraced, or encloses
            break
        gap = text[prev[1] + 1 : pos]
        content = text[prev[0] : prev[1]].strip()
        joined = content != later and len(gap) < CHAIN_JOINED_GAP and _JOINER.search(gap)
        if not (len(gap) < CHAIN_ANY_GAP or joined):
            break
        chain.append(prev)
        later, pos = content, prev_pos
    chain.reverse()
    return chain


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
        span = box_argument(text, start + len(name))
        if span is None:
            pos = start + len(name)
            while pos < len(text) and text[pos] in " \t":
                pos += 1
            if pos < len(text) and text[pos] == "{":
                return spans  # unbalanced: the rest is inside a box the response never closed
            continue
        spans.append(span)
        pos = span[1] + 1
