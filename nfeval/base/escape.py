"""Strings from files into rendered tables: the one place they are escaped.

Model names, architectures, metric and task names, labels and paths come from results files, folder
names and reference files, which anyone can write. Rendered raw, a ``|`` or a newline in one of them
forges cells and rows, ``<!--`` hides the rest of a markdown page, and a CSV cell starting with ``=`` is
a formula to a spreadsheet. Every renderer passes such strings through these functions, so a crafted
file still gives a well-formed table with one row per result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# newlines, carriage returns, tabs and the other control characters, and Unicode's line separators
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_MARKDOWN = str.maketrans({"\\": "\\\\", "|": "\\|", "`": "\\`", "&": "&amp;", "<": "&lt;", ">": "&gt;"})
FORMULA_STARTS = ("=", "+", "-", "@")


def text_cell(value: Any) -> str:
    """Returns ``str(value)`` on one line: each run of control characters (newline, carriage return,
    tab, ...) becomes one space."""
    return _BREAKS.sub(" ", str(value))


def markdown_text(value: Any) -> str:
    """Returns ``value`` as inline markdown that stays inside its table cell or list item: on one line,
    ``\\``, ``|`` and backticks backslash-escaped (no code span of the file's own, which would swallow
    the text around it), ``&``, ``<`` and ``>`` as HTML entities (no tag, comment or entity of the
    file's own)."""
    return text_cell(value).translate(_MARKDOWN)


def markdown_row(cells: Iterable[Any]) -> str:
    """Returns one markdown table row of ``cells``, each escaped by ``markdown_text``."""
    return "| " + " | ".join(markdown_text(c) for c in cells) + " |"


def csv_text(value: Any) -> Any:
    """Returns a CSV field for ``value``: a string on one line (``text_cell``), with a ``'`` before a
    leading ``= + - @`` so a spreadsheet reads it as text, not a formula; a float to 12 significant digits
    (``0.646``, not the binary expansion ``0.6459999999999999``); any other value unchanged."""
    if isinstance(value, float):
        return f"{value:.12g}"
    if not isinstance(value, str):
        return value
    text = text_cell(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def code_block(text: str, info: str = "text") -> list[str]:
    """Returns the lines of a fenced markdown code block holding ``text``; the fence is longer than any
    run of backticks in it, so the text cannot close the block."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]
