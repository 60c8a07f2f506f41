"""PNG figures: perplexity-vs-compute curves of a comparison and the zero-shot bar chart.

Uses matplotlib's object API on the Agg canvas (no pyplot, so no global backend state), and writes
each file atomically; a figure and the JSON it was drawn from are written as one
(``write_json_and_png``).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any, BinaryIO

from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from .artifacts import atomic_write_bytes, atomic_write_files, bytes_writer, json_bytes

PngTarget = str | BinaryIO  # a path, or an open file the PNG is saved into (``write_json_and_png``)


def save_png(fig: Figure, path: PngTarget) -> PngTarget:
    """Writes ``fig`` as PNG to ``path`` via a temp file and a rename, or into ``path`` when it is an open
    binary file (``write_json_and_png``'s temp file); returns ``path``."""
    if not isinstance(path, str):
        fig.savefig(path, format="png", dpi=120)
        return path
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write_bytes(path, buf.getvalue())
    return path


def write_json_and_png(
    json_file: str | None, obj: Any, png: str | None, draw: Callable[[Any, BinaryIO], object]
) -> None:
    """Writes ``obj`` as JSON to ``json_file`` and the figure ``draw(obj, file)`` saves (one of the
    ``plot_*`` functions given an open file as its path) to ``png`` as one
    (``artifacts.atomic_write_files``): both land, or neither, the PNG last; a full disk is one
    OutputError naming the file it hit. Either path may be None: that file is not asked for."""

    def write_png(tmp: str) -> None:
        with open(tmp, "wb") as f:
            draw(obj, f)

    writes = [(json_file, bytes_writer(json_bytes(obj))), (png, write_png)]
    atomic_write_files([(path, write) for path, write in writes if path])


def plot_curves(
    comparison: dict[str, Any], path: PngTarget, time_axis: dict[str, Any] | None = None
) -> PngTarget:
    """Draws validation perplexity vs training FLOPs and vs training wall-clock for the runs of
    ``comparison`` (the dict ``nfeval.compare.compare`` returns), with the baseline's best perplexity and
    the equal-compute budget marked; returns ``path``.

    ``time_axis`` replaces the wall-clock panel by another clock that the val points and the budget
    carry under ``key``: {"key", "label" (the axis, with its unit), "budget_label"}; each run's last
    point is then starred (the end of its schedule)."""
    runs = comparison["runs"]
    second = time_axis["key"] if time_axis else "wall_s"
    longest = max(p["wall_s"] for r in runs for p in r["val"])
    hours = longest >= 360 and not time_axis
    # the FLOPs axis in units of 10^k, named in its label: matplotlib's own offset text ("1e15") floats
    # at the axis end, away from the label, where it reads as part of the last tick
    most = max((p["flops"] for r in runs for p in r["val"]), default=0) or 1
    power = int(math.floor(math.log10(most)))
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    panels = fig.subplots(1, 2, sharey=True)
    time_label = time_axis["label"] if time_axis else f"training wall-clock ({'h' if hours else 's'})"
    labels = (f"training FLOPs (×10^{power})", time_label)
    budget_labels = ("equal-compute budget", "equal-compute budget")
    if time_axis:  # the runs are matched in time; on the FLOPs axis the line is where the first one ends
        budget_labels = ("equal FLOPs: the smaller run's end", time_axis["budget_label"])
    for ax, axis, label, budget_label in zip(panels, ("flops", second), labels, budget_labels):
        scale = (3600 if hours else 1) if axis == second else 10.0**power
        for row in runs:
            points = [p for p in row["val"] if p["val_ppl"] is not None]
            baseline = " (baseline)" if row["name"] == comparison["baseline"] else ""
            (line,) = ax.plot(
                [p[axis] / scale for p in points],
                [p["val_ppl"] for p in points],
                marker="o",
                ms=3,
                label=row["name"] + baseline,
            )
            if time_axis and points:  # the end of the run's schedule
                ax.plot(points[-1][axis] / scale, points[-1]["val_ppl"], "*", ms=11, color=line.get_color())
        if time_axis:
            ax.plot([], [], "*", ms=9, color="grey", label="end of a run's schedule")
        ax.axhline(comparison["target_val_ppl"], ls="--", lw=0.8, color="grey", label="baseline's best")
        ax.axvline(comparison["budget"][axis] / scale, ls=":", lw=0.8, color="black", label=budget_label)
        ax.set_xlabel(label)
        ax.set_yscale("log")
        for ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            ticks(FormatStrFormatter("%g"))  # plain numbers, not 2.2x10^2, on a narrow log range
        ax.grid(alpha=0.3, which="both")
    panels[0].set_ylabel("validation perplexity (log scale)")
    panels[0].legend(fontsize=8)
    if time_axis:
        panels[1].legend(fontsize=8)
    fig.suptitle("Validation perplexity vs compute")
    return save_png(fig, path)


def plot_bars(
    columns: list[str],
    rows: list[tuple[str, list[float | None]]],
    path: str,
    title: str,
    ylabel: str,
    errors: list[list[float | None]] | None = None,
    chance: list[float | None] | None = None,
    missing: list[str] | None = None,
    bounds: tuple[float, float] | None = None,
) -> str:
    """Draws a grouped bar chart, one group per column and one bar per (name, values) row; returns
    ``path``. A missing value (None) gets no bar, never a zero-height one, but an "n/a" where the bar would
    stand (``missing``: that word per column). ``errors`` (per row, per column; None: none) are drawn as
    ± error bars, cut at ``bounds`` (the lowest and highest possible value); ``chance`` (per column) as a
    dashed line across the column's group."""
    fig = Figure(figsize=(max(6.0, 1.4 * len(columns) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(rows))
    for i, (name, values) in enumerate(rows):
        offset = (i - (len(rows) - 1) / 2) * width
        shown = [j for j, v in enumerate(values) if v is not None]
        spread = [(errors[i][j] if errors and errors[i][j] is not None else 0.0) for j in shown]
        low, high = bounds or (-math.inf, math.inf)  # an interval drawn only within the possible values
        below = [min(e, values[j] - low) for e, j in zip(spread, shown)]
        above = [min(e, high - values[j]) for e, j in zip(spread, shown)]
        ax.bar(
            [j + offset for j in shown],
            [values[j] for j in shown],
            width=width,
            label=name,
            yerr=[below, above] if any(spread) else None,
            capsize=2,
        )
        for j in (j for j, v in enumerate(values) if v is None):
            word = missing[j] if missing else "n/a"
            ax.annotate(word, (j + offset, 0), ha="center", va="bottom", fontsize=7, rotation=90)
    for j, level in enumerate(chance or []):
        if level is not None:
            ax.hlines(level, j - 0.45, j + 0.45, colors="black", linestyles="--", lw=0.9)
    if chance and any(level is not None for level in chance):
        ax.plot([], [], "k--", lw=0.9, label="chance")
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)
