"""``nfeval compare``: the command line over ``nfeval.report.compare``."""

from __future__ import annotations

import argparse
import json
import sys

from ..base.artifacts import atomic_write_json
from ..base.cli_args import add_output_file
from ..base.errors import ConfigError
from ..base.outputs import check_output_file
from ..report.compare import compare


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run dirs written by nfeval train; the first is the baseline",
    )
    p.add_argument(
        "--group",
        action="append",
        metavar="NAME=GLOB",
        help="runs of one architecture over seeds, e.g. prenorm='runs/pre-s*' (repeatable; replaces "
        "RUN_DIRs)",
    )
    p.add_argument("--baseline", metavar="RUN_DIR_OR_NAME", help="baseline run (default: the first RUN_DIR)")
    p.add_argument(
        "--names", nargs="+", metavar="NAME", help="display names, one per RUN_DIR (default: dir basenames)"
    )
    p.add_argument(
        "--mixed-recipes",
        action="store_true",
        help="compare runs trained under different recipes (init, optimizer, schedule, ...), labelled as "
        "such; without it they are refused",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    add_output_file(p, metavar="FILE.json", help="also write the JSON to this file")
    p.add_argument(
        "--plot", metavar="FILE.png", help="also draw validation perplexity vs FLOPs and vs wall-clock"
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval compare``: the comparison, then its table (or JSON); ``--output`` and ``--plot`` are
    written as one (both land or neither), each file held by this process from the start
    (``sweep_lock.files_lock``: another nfeval writing either is refused at once, naming it)."""
    check_output_file(args.output, "--output")  # before any work
    check_output_file(args.plot, "--plot")
    from ..base.sweep_lock import files_lock

    with files_lock(args.output, args.plot):
        return _compare(args)


def _compare(args: argparse.Namespace) -> int:
    """Compares the runs ``args`` name, writes ``--output``/``--plot`` and prints the result."""
    from ..report.compare_table import format_comparison

    if args.group or not args.runs:
        from ..report.seeds import compare_groups, format_groups, parse_groups

        if args.runs or args.names or args.plot:
            raise ConfigError("compare: --group replaces RUN_DIRs, --names and --plot; pass one or the other")
        result = compare_groups(
            parse_groups(args.group or []), baseline=args.baseline, mixed_recipes=args.mixed_recipes
        )
        if args.output:
            atomic_write_json(args.output, result)
        print(json.dumps(result, indent=2) if args.json else format_groups(result))
        return 0
    result = compare(args.runs, baseline=args.baseline, names=args.names, mixed_recipes=args.mixed_recipes)
    if args.json:  # the table carries its warnings; JSON on stdout carries them too, repeated on stderr
        for w in result["warnings"]:
            print(f"nfeval compare: warning: {w}", file=sys.stderr)
    if args.output or args.plot:
        from ..base.plots import plot_curves, write_json_and_png

        write_json_and_png(args.output, result, args.plot, plot_curves)
    print(json.dumps(result, indent=2) if args.json else format_comparison(result))
    return 0
