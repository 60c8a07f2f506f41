"""Writing a benchmark's figures into ``benchmarks/RESULTS.md``: one marked block per benchmark and shape,
replaced in place on a rerun, or added under its section's heading the first time."""

from __future__ import annotations

import re
from pathlib import Path


def write_block(path: str, marker: str, block: str, heading: str) -> None:
    """Replaces the block of ``path`` between ``<!-- marker -->`` and ``<!-- /marker -->`` with ``block``,
    or inserts it right under ``heading`` (appends it when the file has no such heading)."""
    text = Path(path).read_text(encoding="utf-8") if Path(path).is_file() else ""
    begin, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    marked = f"{begin}\n{block}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: marked, text, flags=re.S)
    else:
        heading = heading.rstrip("\n") + "\n"
        text = text.replace(heading, f"{heading}\n{marked}\n", 1) if heading in text else f"{text}{marked}\n"
    Path(path).write_text(text, encoding="utf-8")
