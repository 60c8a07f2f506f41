"""The final perplexities of run records and their paired log ratios, as every verdict of ``reproduce``
and ``bakeoff`` reads them: a run's perplexity on the judging set (``judging``: the whole validation
split) where it was read there, else its own last validation (a record from before judging sets); a
diverged run's perplexity is inf (worse than any finite one), and a pair in which both runs diverged is
no evidence either way (nan).
"""

from __future__ import annotations

import math
from typing import Any


def log_ratio(a: float | None, b: float | None) -> float:
    """Returns log(a / b). A diverged run's PPL is inf (worse than any finite one); the result is nan
    (no evidence either way) when a value is missing (None) or both runs diverged."""
    if a is None or b is None or (math.isinf(a) and math.isinf(b)):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        return math.inf if math.isinf(a) else -math.inf
    return math.log(a / b)


def judged_ppl(record: dict[str, Any]) -> float | None:
    """Returns a finished run's final perplexity: on the judging set when the record has one, else its
    last validation's (None: it diverged)."""
    judge = record.get("judge")
    return judge["ppl"] if judge else record.get("val_ppl")


def final_ppl(records: list[dict[str, Any]]) -> list[float]:
    """Returns each seed's final PPL (``judged_ppl``), inf for a diverged run."""
    return [judged_ppl(r) if r["status"] == "finished" else math.inf for r in records]
