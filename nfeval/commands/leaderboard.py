"""``nfeval leaderboard``: the command line over ``nfeval.report.leaderboard``."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from ..analysis.tables import load_analysis
from ..base.cli_args import add_old_out_spelling
from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..base.errors import ConfigError
from ..base.outputs import check_output_file
from ..report import paired
from ..report.compare import compare
from ..report.leaderboard import build
from ..report.leaderboard_page import page_format, write
from ..report.leaderboard_read import (
    GROUP_MEASURES,
)
from ..report.leaderboard_render import render


@dataclass(frozen=True)
class LeaderboardOptions:
    """``nfeval leaderboard``'s flags (``base.config_flags``): where the page goes and in which format, row
    names, reference rows, metrics, compute-matched grouping, runs to plot, a title, a paired baseline
    with its bootstrap, and analysis sections."""

    output: str | None = flag_field(
        None,
        "output file: NAME.md (markdown, with plots NAME_*.png beside it), NAME.csv or NAME.json; default: "
        "stdout, no plots",
        metavar="FILE",
    )
    format: str | None = flag_field(
        None, "on stdout (default md); with --output its suffix decides", choices=("md", "csv", "json")
    )
    names: list[str] | None = flag_field(
        None,
        "row names, one per model in order of first appearance; after the results files",
        type=str,
        nargs="+",
        metavar="NAME",
    )
    reference: str | None = flag_field(
        None, "add the reference rows nearest in size to ours", metavar="gpt3|PATH"
    )
    metric: list[str] | None = flag_field(
        None,
        "zero-shot metric per column: gpt3 (default), acc, acc_norm, or e.g. hellaswag=acc_norm; repeatable",
        action="append",
        metavar="PRESET|TASK=METRIC",
    )
    group_by: str = flag_field(
        "none",
        "group compute-matched rows (compute = device-hours, the paper's equal GPU time)",
        choices=("none", *GROUP_MEASURES),
    )
    group_tolerance: float = flag_field(0.1, "relative spread within a group (default 0.1)")
    runs: list[str] | None = flag_field(
        None,
        "also plot validation perplexity vs compute for these runs",
        type=str,
        nargs="+",
        metavar="RUN_DIR",
    )
    title: str = flag_field("Leaderboard", "markdown title")
    baseline: str | None = flag_field(
        None, "add paired differences to this row (name or fingerprint)", metavar="NAME"
    )
    resamples: int = flag_field(10_000, "bootstrap resamples for --baseline")
    bootstrap_seed: int = flag_field(0, "bootstrap seed for --baseline")
    analysis: list[str] | None = flag_field(
        None,
        "add an analysis section from `nfeval analyze` JSON (grads, gains, stability); repeatable",
        action="append",
        metavar="FILE.json",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval leaderboard``'s results files and LeaderboardOptions' flags."""
    p.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        help="zero-shot results JSON (or lm-eval --output_path folders) and/or GLUE summary JSON files",
    )
    add_config_flags(p, LeaderboardOptions)
    add_old_out_spelling(p)


def check_names(results: list[str], names: list[str] | None) -> None:
    """Raises ConfigError when ``--names`` took results files (``--names a b r1.json r2.json``: a list
    option swallows what follows it) or no results file is left; returns None."""
    swallowed = [n for n in names or [] if n.endswith(".json") or os.path.isfile(n)]
    if swallowed:
        raise ConfigError(
            f"--names: {swallowed[0]!r} is a results file, not a row name: --names takes every word after "
            "it, so put it after the results files (nfeval leaderboard r1.json r2.json --names a b)"
        )
    if not results:
        raise ConfigError("RESULTS: expected at least one results file (zero-shot or GLUE JSON)")


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval leaderboard``: builds the board and prints or writes it."""
    results, opts = args.results, config_from_args(args, LeaderboardOptions)
    check_names(results, opts.names)
    check_output_file(opts.output, "--output")  # before any work
    fmt = page_format(opts.output, opts.format)
    analyses = [load_analysis(path) for path in opts.analysis or []]  # checked before any other work
    board = build(
        results,
        names=opts.names,
        reference=opts.reference,
        metric=opts.metric,
        group_by=opts.group_by,
        group_tolerance=opts.group_tolerance,
    )
    if opts.baseline:
        paired.add_to_board(board, opts.baseline, n_resamples=opts.resamples, seed=opts.bootstrap_seed)
    if analyses:
        board["analysis"] = analyses
    for w in board["warnings"]:
        print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    comparison = None
    if opts.runs:
        comparison = compare(opts.runs)
        for w in comparison["warnings"]:
            print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    if opts.output:
        write(board, opts.output, title=opts.title, comparison=comparison)
        print(f"wrote {opts.output}", file=sys.stderr)
    else:
        sys.stdout.write(render(board, fmt, opts.title))
    return 0
