"""benchmarks/RESULTS.md holds today's figures only; superseded ones move to benchmarks/HISTORY.md."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_RESULTS_LINES = 400


def test_results_md_holds_only_the_newest_figures():
    results = REPO / "benchmarks" / "RESULTS.md"
    n = len(results.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_RESULTS_LINES, (
        f"benchmarks/RESULTS.md has {n} lines (at most {MAX_RESULTS_LINES}): "
        "move superseded figures to HISTORY.md"
    )
