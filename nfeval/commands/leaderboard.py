"""``nfeval leaderboard``: the command line over ``nfeval.report.leaderboard``."""

from __future__ import annotations

import argparse
import os
import sys

from ..base.cli_args import add_output_file
from ..base.errors import ConfigError
from ..base.outputs import check_output_file
from ..report import paired
from ..report.leaderboard import build
from ..report.leaderboard_page import page_format, write
from ..report.leaderboard_read import (
    GROUP_MEASURES,
)
from ..report.leaderboard_render import render


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        help="zero-shot results JSON (or lm-eval --output_path folders) and/or GLUE summary JSON files",
    )
    add_output_file(
        p,
        metavar="FILE",
        help="output file: NAME.md (markdown, with plots NAME_*.png beside it), NAME.csv or NAME.json; "
        "default: stdout, no plots",
    )
    p.add_argument(
        "--format",
        choices=("md", "csv", "json"),
        help="on stdout (default md); with --output its suffix decides",
    )
    p.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="row names, one per model in order of first appearance; after the results files",
    )
    p.add_argument("--reference", metavar="gpt3|PATH", help="add the reference rows nearest in size to ours")
    p.add_argument(
        "--metric",
        action="append",
        metavar="PRESET|TASK=METRIC",
        help="zero-shot metric per column: gpt3 (default), acc, acc_norm, or e.g. hellaswag=acc_norm; "
        "repeatable",
    )
    p.add_argument(
        "--group-by",
        choices=("none", *GROUP_MEASURES),
        default="none",
        help="group compute-matched rows (compute = device-hours, the paper's equal GPU time)",
    )
    p.add_argument(
        "--group-tolerance", type=float, default=0.1, help="relative spread within a group (default 0.1)"
    )
    p.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN_DIR",
        help="also plot validation perplexity vs compute for these runs",
    )
    p.add_argument("--title", default="Leaderboard", help="markdown title")
    p.add_argument(
        "--baseline", metavar="NAME", help="add paired differences to this row (name or fingerprint)"
    )
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples for --baseline")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="bootstrap seed for --baseline")
    p.add_argument(
        "--analysis",
        action="append",
        metavar="FILE.json",
        help="add an analysis section from `nfeval analyze` JSON (grads, gains, stability); repeatable",
    )


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
    check_names(args.results, args.names)
    check_output_file(args.output, "--output")  # before any work
    fmt = page_format(args.output, args.format)
    from ..analysis.tables import load_analysis

    analyses = [load_analysis(path) for path in args.analysis or []]  # checked before any other work
    board = build(
        args.results,
        names=args.names,
        reference=args.reference,
        metric=args.metric,
        group_by=args.group_by,
        group_tolerance=args.group_tolerance,
    )
    if args.baseline:
        paired.add_to_board(board, args.baseline, n_resamples=args.resamples, seed=args.bootstrap_seed)
    if analyses:
        board["analysis"] = analyses
    for w in board["warnings"]:
        print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    comparison = None
    if args.runs:
        from ..report.compare import compare

        comparison = compare(args.runs)
        for w in comparison["warnings"]:
            print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    if args.output:
        write(board, args.output, title=args.title, comparison=comparison)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(render(board, fmt, args.title))
    return 0
