"""``nfeval analyze grads|gains|stability``: the command line over ``nfeval.analysis.runs``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..analysis import tables
from ..analysis.runs import GainsOptions, GradsOptions, Options, StabilityOptions, analyze, json_path
from ..analysis.stability import StabilitySettings
from ..base.cli_args import add_output_file, device_name, positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the three analyses as sub-commands, each with its options and ``--output PNG``."""
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    g, s, st = _grads_parser(sub), _gains_parser(sub), _stability_parser(sub)
    for parser, name in ((g, "grads"), (s, "gains"), (st, "stability")):
        add_output_file(parser, default=f"{name}.png", help=f"PNG path; JSON beside it (default {name}.png)")
        parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")


def _grads_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze grads``' parser with its options."""
    g = sub.add_parser("grads", help="gradient norm by layer (Figures 3 and 7)")
    g.add_argument("runs", nargs="*", metavar="RUN", help="run dirs trained with --grad-stats START:END")
    g.add_argument(
        "--ckpt",
        action="append",
        default=[],
        metavar="PATH|preset:NAME",
        help="compute at a checkpoint (run/checkpoint dir, fairseq file) or at a preset's init, "
        "e.g. preset:postnorm-small (repeatable)",
    )
    g.add_argument("--kind", default="fc2", help="parameter kind to plot (default fc2, the paper's)")
    g.add_argument("--baseline", metavar="NAME", help="Figure 7's baseline (default: first Pre-LN model)")
    _data_arguments(g, batches=True)
    g.add_argument(
        "--fairseq-dict", metavar="FILE", help="fairseq dict.txt of a .pt file (default: dict.txt beside it)"
    )
    g.add_argument(
        "--fairseq-head-scale-bug", action="store_true", help="fairseq files from before 2021-11-03"
    )
    return g


def _gains_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze gains``' parser with its options."""
    s = sub.add_parser("gains", help="learned NormFormer gains by layer (Figures 4 and 6)")
    s.add_argument(
        "targets", nargs="+", metavar="RUN_OR_CKPT", help="nfeval run/checkpoint dir or fairseq file"
    )
    s.add_argument(
        "--fairseq-head-scale-bug", action="store_true", help="fairseq files from before 2021-11-03"
    )
    return s


def _stability_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Returns ``analyze stability``' parser with its options."""
    st = sub.add_parser("stability", help="increasing-LR stability test (Figure 5)")
    st.add_argument("--preset", action="append", required=True, help="preset to test (repeatable)")
    st.add_argument("--seeds", type=int, default=3, help="seeds 1..N (default 3)")
    st.add_argument("--updates", type=int, default=200)
    st.add_argument("--lr-start", type=float, default=1e-5)
    st.add_argument("--lr-end", type=float, default=1.0)
    st.add_argument(
        "--noise-updates",
        type=int,
        default=10,
        help="first updates that measure the batch noise (default 10)",
    )
    st.add_argument(
        "--noise-multiple",
        type=float,
        default=5.0,
        help="a running median loss this many noise std above the first updates' mean diverges (default 5)",
    )
    st.add_argument("--smoothing", type=int, default=5, help="losses in the running median (default 5)")
    st.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="model config override of every preset, as nfeval train --set (repeatable)",
    )
    st.add_argument(
        "--autocast",
        default="fp32",
        choices=("fp32", "bf16", "fp16"),
        help="forward in torch autocast at this precision (fp32: off); the paper trained in fp16",
    )
    st.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    _data_arguments(st, batches=False)
    return st


def _data_arguments(p: argparse.ArgumentParser, batches: bool) -> None:
    p.add_argument("--data", metavar="FILE", help="text file or folder (default: the embedded corpus)")
    p.add_argument(
        "--tokenizer",
        help="tokenizer.json, or GPT-2's BPE folder for a fairseq .pt with a dict.txt "
        "(default: the checkpoint's, required for one without; a preset's: a BPE trained on the data)",
    )
    p.add_argument("--batch-size", type=positive_int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=1, help="data order, dropout masks and preset initialisation")
    if batches:
        p.add_argument("--batches", type=int, default=4, help="batches to average over (default 4)")


def options(args: argparse.Namespace) -> Options:
    """Returns the library options of the analysis ``args`` ask for (``--set`` read by ``parse_set``)."""
    if args.analysis != "stability":  # their flags are named as their options
        cls = GradsOptions if args.analysis == "grads" else GainsOptions
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
    from ..engine.training.train_config import parse_set

    names = ("updates", "lr_start", "lr_end", "batch_size", "seq_len", "autocast", "device")
    names += ("noise_updates", "noise_multiple", "smoothing")
    return StabilityOptions(
        presets=args.preset,
        seeds=args.seeds,
        model=parse_set(args.set),
        settings=StabilitySettings(**{k: getattr(args, k) for k in names}),
        data=args.data,
        tokenizer=args.tokenizer,
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval analyze``: the analysis, then its table (or JSON) and where the files went."""
    result = analyze(options(args), args.output)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(tables.TABLES[args.analysis](result)))
    print(f"wrote {args.output}, {json_path(args.output)}", file=sys.stderr)
    return 0
