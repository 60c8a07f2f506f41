"""PNG figures: perplexity-vs-compute curves of a comparison and the zero-shot bar chart.

Uses matplotlib's object API on the Agg canvas (no pyplot, so no global backend state), and writes
each file atomically.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from .artifacts import atomic_write_bytes


def save_png(fig: Figure, path: str) -> str:
    """Writes ``fig`` to ``path`` as PNG via a temp file and a rename; returns ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write_bytes(path, buf.getvalue())
    return path


def plot_curves(comparison: dict[str, Any], path: str) -> str:
    """Draws validation perplexity vs training FLOPs and vs training wall-clock for the runs of
    ``comparison`` (the dict ``nfeval.compare.compare`` returns), with the baseline's best perplexity and
    the equal-compute budget marked; returns ``path``."""
    runs = comparison["runs"]
    longest = max(p["wall_s"] for r in runs for p in r["val"])
    hours = longest >= 360
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    panels = fig.subplots(1, 2, sharey=True)
    for ax, axis, label in zip(
        panels, ("flops", "wall_s"), ("training FLOPs", f"training wall-clock ({'h' if hours else 's'})")
    ):
        scale = 3600 if axis == "wall_s" and hours else 1
        for row in runs:
            points = [p for p in row["val"] if p["val_ppl"] is not None]
            baseline = " (baseline)" if row["name"] == comparison["baseline"] else ""
            ax.plot(
                [p[axis] / scale for p in points],
                [p["val_ppl"] for p in points],
                marker="o",
                ms=3,
                label=row["name"] + baseline,
            )
        ax.axhline(comparison["target_val_ppl"], ls="--", lw=0.8, color="grey", label="baseline's best")
        ax.axvline(
            comparison["budget"][axis] / scale, ls=":", lw=0.8, color="black", label="equal-compute budget"
        )
        ax.set_xlabel(label)
        ax.set_yscale("log")
        for ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            ticks(FormatStrFormatter("%g"))  # plain numbers, not 2.2x10^2, on a narrow log range
        ax.grid(alpha=0.3, which="both")
    panels[0].set_ylabel("validation perplexity")
    panels[0].legend(fontsize=8)
    fig.suptitle("Validation perplexity vs compute")
    return save_png(fig, path)


def plot_bars(
    columns: list[str], rows: list[tuple[str, list[float | None]]], path: str, title: str, ylabel: str
) -> str:
    """Draws a grouped bar chart, one group per column and one bar per (name, values) row; a missing
    value (None) gets no bar, never a zero-height one; returns ``path``."""
    fig = Figure(figsize=(max(6.0, 1.4 * len(columns) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(rows))
    for i, (name, values) in enumerate(rows):
        xs = [j + (i - (len(rows) - 1) / 2) * width for j, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width=width, label=name)
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)
