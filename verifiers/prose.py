"""The text math-verify reads for an answer in prose (the ``prose`` strategy of the
``mathverify`` preset).

math-verify finds an answer in prose with two readings at once: LaTeX in math delimiters, and
plain expressions (``Answer: 9``). Its LaTeX reading refuses an inline math span that crosses a
line (``$ \\n 9 \\n $``, ``\\( \\n 9 \\n \\)``: see ``make_latex_env_pattern`` in math-verify's
``parser.py``), and its own suite says such a response states no answer; but its plain reading
still finds the 9 inside the span, so with both readings on it pays the response. The prose
strategy hands math-verify the response with such spans removed: math that its LaTeX reading
refuses is not read as plain text either. Everything else is handed over as written, so both
readings keep their priorities (``The largest $n$ is 34.`` is still 34).
"""

from __future__ import annotations

import re

__all__ = ["readable_prose"]

# An inline math span: a single dollar (not part of $$, not escaped, not after a digit, as
# math-verify's opener) up to the next single dollar; or \( ... \). Each character is read one
# way only (an escape pair, or anything but a backslash and the closer), so a long text with
# an unclosed opener costs linear time.
_INLINE = re.compile(
    r"(?<![\\\d$])\$(?!\$)(?:\\.|[^\\$])*(?<!\\)\$(?!\$)"
    r"|(?<!\\)\\\((?:[^\\]|\\(?!\)))*\\\)",
    re.S,
)


def _drop_if_broken(match: re.Match[str]) -> str:
    return " " if "\n" in match.group(0) else match.group(0)


def readable_prose(text: str) -> str:
    """``text`` with its inline math spans that cross a line replaced by a space."""
    if "\n" not in text:
        return text
    return _INLINE.sub(_drop_if_broken, text)
