"""A leaderboard page on disk: the file written in the format its name's suffix says (``page_format``)
and, beside a markdown page, its images, named after the page so that two pages never share one."""

from __future__ import annotations

import os
from typing import Any

from ..base.artifacts import atomic_write_text
from ..base.errors import ConfigError
from ..base.sweep_lock import file_lock
from .leaderboard_read import CHANCE, USER_SUPPLIED, USER_SUPPLIED_TASKS, YARDSTICK
from .leaderboard_render import render

# The suffix of a page names its format; only markdown pages get images (NAME_*.png), so the one
# suffix that has them keeps a page's images its own.
PAGE_FORMATS = {".md": "md", ".csv": "csv", ".json": "json"}


def page_format(path: str | None, fmt: str | None = None) -> str:
    """Returns the format of a leaderboard written to ``path``: its suffix's (.md markdown, .csv, .json);
    on stdout (``path`` None) ``fmt``, markdown by default. A ConfigError for any other suffix, and for a
    ``fmt`` that the suffix contradicts."""
    if path is None:
        return fmt or "md"
    suffix = os.path.splitext(path)[1]
    if suffix not in PAGE_FORMATS:
        raise ConfigError(
            f"--output {path}: expected a name ending in .md (markdown), .csv or .json; the format follows "
            "the suffix"
        )
    if fmt not in (None, PAGE_FORMATS[suffix]):
        raise ConfigError(
            f"--format {fmt}: --output {path} is {PAGE_FORMATS[suffix]} by its suffix; the format follows "
            "the suffix, so drop --format or rename the file"
        )
    return PAGE_FORMATS[suffix]


def _zeroshot_plot(table: dict[str, Any], path: str) -> str:
    """Draws the zero-shot bar chart (95% error bars, chance marked per task); returns ``path``."""
    from ..base.plots import plot_bars

    def percent(cell, key):
        return None if cell is None or cell.get(key) is None else 100 * cell[key]

    bars = [
        (r["name"], [percent(r["scores"][c["task"]], "value") for c in table["columns"]])
        for r in table["rows"]
        if r["reference"] != YARDSTICK
    ]
    errors = [
        [percent(r["scores"][c["task"]], "half_width") for c in table["columns"]]
        for r in table["rows"]
        if r["reference"] != YARDSTICK
    ]
    chance = [None if CHANCE.get(c["task"]) is None else 100 * CHANCE[c["task"]] for c in table["columns"]]
    columns = [f"{c['title']}\n{c['metric']}" for c in table["columns"]]
    missing = [USER_SUPPLIED if c["task"] in USER_SUPPLIED_TASKS else "n/a" for c in table["columns"]]
    title = "Zero-shot accuracy (bars: 95% interval; dashes: chance)"
    return plot_bars(
        columns,
        bars,
        path,
        title,
        "accuracy (%)",
        errors=errors,
        chance=chance,
        missing=missing,
        bounds=(0, 100),
    )


def write(
    board: dict[str, Any],
    out: str,
    title: str = "Leaderboard",
    comparison: dict | None = None,
    *,
    comparison_text: str | None = None,
    time_axis: dict[str, Any] | None = None,
    about: list[str] | None = None,
) -> str:
    """Writes ``board`` to ``out`` in the format of its suffix (``page_format``); for markdown also draws,
    beside it, the zero-shot bar chart and (given a ``nfeval.compare.compare`` result) the
    perplexity-vs-compute curves, named after the page (``NAME_zeroshot.png``, ``NAME_curves.png`` for
    ``NAME.md``: two pages never share an image). Returns the rendered text. ``comparison_text``
    replaces compare's table under the curves (a pipeline's own reading of its runs), ``time_axis`` is
    ``plot_curves``'s, ``about`` ``render_markdown``'s. One writer per ``out``
    (``sweep_lock.file_lock``): another one writing it is refused at once, naming the holder, so the page
    and its images are one board's."""
    from ..base.plots import plot_curves

    fmt, stem = page_format(out), os.path.splitext(out)[0]
    images, table_text = {}, None
    with file_lock(out):
        if fmt == "md" and "zeroshot" in board:
            images["zeroshot"] = os.path.basename(_zeroshot_plot(board["zeroshot"], f"{stem}_zeroshot.png"))
        if fmt == "md" and comparison:
            from .compare_table import format_comparison  # checkpoint readers: only with --runs

            curves = plot_curves(comparison, f"{stem}_curves.png", time_axis=time_axis)
            images["curves"] = os.path.basename(curves)
            table_text = comparison_text or format_comparison(comparison)
        text = render(board, fmt, title, images, table_text, base_dir=os.path.dirname(out), about=about)
        atomic_write_text(out, text)
    return text
