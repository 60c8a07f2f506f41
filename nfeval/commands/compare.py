"""``nfeval compare``: the command line over ``nfeval.report.compare``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from ..base.artifacts import atomic_write_json
from ..base.cli_args import add_old_out_spelling
from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..base.errors import ConfigError
from ..base.outputs import check_output_file
from ..base.sweep_lock import files_lock
from ..report.compare import compare
from ..report.compare_table import format_comparison


@dataclass(frozen=True)
class CompareOptions:
    """``nfeval compare``'s flags (``base.config_flags``): seed groups (instead of run folders), the
    baseline, display names, whether mixed recipes are allowed, JSON output, and the files to write."""

    group: list[str] | None = flag_field(
        None,
        "runs of one architecture over seeds, e.g. prenorm='runs/pre-s*' (repeatable; replaces RUN_DIRs)",
        action="append",
        metavar="NAME=GLOB",
    )
    baseline: str | None = flag_field(
        None, "baseline run (default: the first RUN_DIR)", metavar="RUN_DIR_OR_NAME"
    )
    names: list[str] | None = flag_field(
        None, "display names, one per RUN_DIR (default: dir basenames)", type=str, nargs="+", metavar="NAME"
    )
    mixed_recipes: bool = flag_field(
        False,
        "compare runs trained under different recipes (init, optimizer, schedule, ...), labelled as such; "
        "without it they are refused",
        action="store_true",
    )
    json: bool = flag_field(False, "print JSON instead of the table", action="store_true")
    output: str | None = flag_field(None, "also write the JSON to this file", metavar="FILE.json")
    plot: str | None = flag_field(
        None, "also draw validation perplexity vs FLOPs and vs wall-clock", metavar="FILE.png"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval compare``'s run folders and CompareOptions' flags."""
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run dirs written by nfeval train; the first is the baseline",
    )
    add_config_flags(p, CompareOptions)
    add_old_out_spelling(p)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval compare``: the comparison, then its table (or JSON); ``--output`` and ``--plot`` are
    written as one (both land or neither), each file held by this process from the start
    (``sweep_lock.files_lock``: another nfeval writing either is refused at once, naming it)."""
    opts = config_from_args(args, CompareOptions)
    check_output_file(opts.output, "--output")  # before any work
    check_output_file(opts.plot, "--plot")
    with files_lock(opts.output, opts.plot):
        return _compare(args.runs, opts)


def _compare(runs: list[str], args: CompareOptions) -> int:
    """Compares ``runs`` (or ``args.group``), writes ``--output``/``--plot`` and prints the result."""
    if args.group or not runs:
        from ..report.seeds import compare_groups, format_groups, parse_groups

        if runs or args.names or args.plot:
            raise ConfigError("compare: --group replaces RUN_DIRs, --names and --plot; pass one or the other")
        result = compare_groups(
            parse_groups(args.group or []), baseline=args.baseline, mixed_recipes=args.mixed_recipes
        )
        if args.output:
            atomic_write_json(args.output, result)
        print(json.dumps(result, indent=2) if args.json else format_groups(result))
        return 0
    result = compare(runs, baseline=args.baseline, names=args.names, mixed_recipes=args.mixed_recipes)
    if args.json:  # the table carries its warnings; JSON on stdout carries them too, repeated on stderr
        for w in result["warnings"]:
            print(f"nfeval compare: warning: {w}", file=sys.stderr)
    if args.output or args.plot:
        from ..base.plots import plot_curves, write_json_and_png

        write_json_and_png(args.output, result, args.plot, plot_curves)
    print(json.dumps(result, indent=2) if args.json else format_comparison(result))
    return 0
