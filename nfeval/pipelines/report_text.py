"""The text every pipeline's report writes alike: markdown tables with each cell escaped, a paired
step-time ratio in words beside the paper's overhead, and the sentence naming what computed the runs.
``reproduce``, ``bakeoff`` and ``demo`` render their reports with them.
"""

from __future__ import annotations

from typing import Any

from ..base.escape import markdown_row
from ..engine.training.step_ratio import CONFIDENCE

PAPER_OVERHEAD = "2–6%"  # Shleifer et al. 2021: NormFormer's extra operations cost 2-6% of step time


def markdown_table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    """Returns a GitHub markdown table, each cell escaped (``escape.markdown_row``: architecture, preset
    and run names come from flags and files)."""
    return [markdown_row(columns), "|" + "---|" * len(columns)] + [markdown_row(row) for row in rows]


def ratio_text(record: dict[str, Any]) -> str:
    """Returns "1.043 [1.021, 1.060] (+4.3%)": the ratio, its 95% confidence interval (its coverage
    named when fewer pairs allowed less) and the overhead."""
    coverage = record.get("confidence", 1.0)
    level = "" if coverage >= CONFIDENCE else f" {coverage:.1%} CI"
    ci = f"[{record['ci_low']:.3f}, {record['ci_high']:.3f}{level}]"
    return f"{record['ratio']:.3f} {ci} ({record['ratio'] - 1:+.1%})"


def compute_path_lines(h: dict[str, Any]) -> list[str]:
    """Returns the sentence naming what computed the runs (a report made before it was recorded has
    none): two paths mean numbers that need not agree to rounding (benchmarks/RESULTS.md, "Re-run
    tolerance")."""
    paths = h.get("compute_paths")
    if not paths:
        return []
    text = f"Computed on: {'; and '.join(paths)}."
    if len(paths) > 1:
        text += " The runs were computed on more than one path: their numbers can differ beyond rounding."
    return [text, ""]
