"""``nfeval analyze grads|gains|stability``: the command line over ``nfeval.analysis.runs``."""

from __future__ import annotations

import argparse
import json
import sys

from ..analysis import tables
from ..analysis.runs import GainsOptions, GradsOptions, Options, StabilityOptions, analyze, json_path
from ..analysis.stability import StabilitySettings
from ..base.cli_args import add_output_file
from ..base.config_flags import add_config_flags, config_from_args
from ..engine.training.train_config import parse_set


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the three analyses as sub-commands, each with its options and ``--output PNG``."""
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    g, s, st = _grads_parser(sub), _gains_parser(sub), _stability_parser(sub)
    for parser, name in ((g, "grads"), (s, "gains"), (st, "stability")):
        add_output_file(parser, default=f"{name}.png", help=f"PNG path; JSON beside it (default {name}.png)")
        parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")


# analyze stability's flags in the order of its help: StabilityOptions' and its StabilitySettings'
STABILITY_FLAGS = (
    (StabilityOptions, "presets seeds"),
    (StabilitySettings, "updates lr_start lr_end noise_updates noise_multiple smoothing"),
    (StabilityOptions, "model"),
    (StabilitySettings, "autocast device"),
    (StabilityOptions, "data tokenizer"),
    (StabilitySettings, "batch_size seq_len"),
    (StabilityOptions, "seed"),
)


def _grads_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze grads``' parser: its runs, then GradsOptions' flags (``base.config_flags``)."""
    g = sub.add_parser("grads", help="gradient norm by layer (Figures 3 and 7)")
    g.add_argument("runs", nargs="*", metavar="RUN", help="run dirs trained with --grad-stats START:END")
    add_config_flags(g, GradsOptions)
    return g


def _gains_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze gains``' parser: its targets, then GainsOptions' flags."""
    s = sub.add_parser("gains", help="learned NormFormer gains by layer (Figures 4 and 6)")
    s.add_argument(
        "targets", nargs="+", metavar="RUN_OR_CKPT", help="nfeval run/checkpoint dir or fairseq file"
    )
    add_config_flags(s, GainsOptions)
    return s


def _stability_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze stability``' parser: StabilityOptions' and StabilitySettings' flags."""
    st = sub.add_parser("stability", help="increasing-LR stability test (Figure 5)")
    for cls, names in STABILITY_FLAGS:
        add_config_flags(st, cls, names=names.split())
    return st


def options(args: argparse.Namespace) -> Options:
    """Returns the library options of the analysis ``args`` ask for (``--set`` read by ``parse_set``)."""
    if args.analysis == "grads":
        return config_from_args(args, GradsOptions, runs=args.runs)
    if args.analysis == "gains":
        return config_from_args(args, GainsOptions, targets=args.targets)
    settings = config_from_args(args, StabilitySettings)
    return config_from_args(args, StabilityOptions, model=parse_set(args.model or []), settings=settings)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval analyze``: the analysis, then its table (or JSON) and where the files went."""
    result = analyze(options(args), args.output)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(tables.TABLES[args.analysis](result)))
    print(f"wrote {args.output}, {json_path(args.output)}", file=sys.stderr)
    return 0
