"""``nfeval compare-scores``: the command line over ``nfeval.report.compare_scores``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ..base.artifacts import atomic_write_json
from ..base.cli_args import add_old_out_spelling
from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..base.outputs import check_output_file
from ..report import significance as sig
from ..report.compare_scores import compare_scores, format_rows


@dataclass(frozen=True)
class CompareScoresOptions:
    """``nfeval compare-scores``' flags (``base.config_flags``): the paired bootstrap's resamples, seed and
    confidence, JSON output, and a file to write the JSON to."""

    resamples: int = flag_field(sig.N_RESAMPLES, f"bootstrap resamples (default {sig.N_RESAMPLES})")
    seed: int = flag_field(sig.SEED, f"bootstrap seed (default {sig.SEED})")
    confidence: float = flag_field(sig.CONFIDENCE, f"default {sig.CONFIDENCE}")
    json: bool = flag_field(False, "print JSON instead of the table", action="store_true")
    output: str | None = flag_field(None, "also write the JSON to this file", metavar="FILE.json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval compare-scores``' two results files and CompareScoresOptions' flags."""
    p.add_argument(
        "a",
        metavar="A.json",
        help="candidate: zero-shot results (F.json, lm-eval's results_<date>.json or its "
        "--output_path model folder) or GLUE summary",
    )
    p.add_argument("b", metavar="B.json", help="baseline, of the same kind")
    add_config_flags(p, CompareScoresOptions)
    add_old_out_spelling(p)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval compare-scores``."""
    opts = config_from_args(args, CompareScoresOptions)
    check_output_file(opts.output, "--output")  # before any work
    result = compare_scores(args.a, args.b, opts.resamples, opts.seed, opts.confidence)
    if opts.output:
        atomic_write_json(opts.output, result)
    print(json.dumps(result, indent=2) if opts.json else format_rows(result))
    return 0
