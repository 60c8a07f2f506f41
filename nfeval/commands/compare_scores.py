"""``nfeval compare-scores``: the command line over ``nfeval.report.compare_scores``."""

from __future__ import annotations

import argparse
import json

from ..base.artifacts import atomic_write_json
from ..base.cli_args import add_output_file
from ..base.outputs import check_output_file
from ..report import significance as sig
from ..report.compare_scores import compare_scores, format_rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval compare-scores``' options."""
    p.add_argument(
        "a",
        metavar="A.json",
        help="candidate: zero-shot results (F.json, lm-eval's results_<date>.json or its "
        "--output_path model folder) or GLUE summary",
    )
    p.add_argument("b", metavar="B.json", help="baseline, of the same kind")
    p.add_argument(
        "--resamples", type=int, default=sig.N_RESAMPLES, help="bootstrap resamples (default %(default)s)"
    )
    p.add_argument("--seed", type=int, default=sig.SEED, help="bootstrap seed (default %(default)s)")
    p.add_argument("--confidence", type=float, default=sig.CONFIDENCE, help="default %(default)s")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    add_output_file(p, metavar="FILE.json", help="also write the JSON to this file")


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval compare-scores``."""
    check_output_file(args.output, "--output")  # before any work
    result = compare_scores(args.a, args.b, args.resamples, args.seed, args.confidence)
    if args.output:
        atomic_write_json(args.output, result)
    print(json.dumps(result, indent=2) if args.json else format_rows(result))
    return 0
