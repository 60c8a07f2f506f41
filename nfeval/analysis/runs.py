"""``nfeval analyze``'s three analyses as library calls: their options (``add_arguments``), and
``analyze(options)``, which runs one, writes its JSON and PNG, and returns the result. The command and
``nfeval reproduce`` both run them through here."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..base.artifacts import atomic_write_json, provenance
from ..base.cli_args import add_output_file
from ..base.errors import ConfigError
from ..base.outputs import check_output_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
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
    s = sub.add_parser("gains", help="learned NormFormer gains by layer (Figures 4 and 6)")
    s.add_argument(
        "targets", nargs="+", metavar="RUN_OR_CKPT", help="nfeval run/checkpoint dir or fairseq file"
    )
    s.add_argument(
        "--fairseq-head-scale-bug", action="store_true", help="fairseq files from before 2021-11-03"
    )
    g.add_argument(
        "--fairseq-dict", metavar="FILE", help="fairseq dict.txt of a .pt file (default: dict.txt beside it)"
    )
    g.add_argument(
        "--fairseq-head-scale-bug", action="store_true", help="fairseq files from before 2021-11-03"
    )
    st = sub.add_parser("stability", help="increasing-LR stability test (Figure 5)")
    st.add_argument("--preset", action="append", required=True, help="preset to test (repeatable)")
    st.add_argument("--seeds", type=int, default=3, help="seeds 1..N (default 3)")
    st.add_argument("--updates", type=int, default=200)
    st.add_argument("--lr-start", type=float, default=1e-5)
    st.add_argument("--lr-end", type=float, default=1.0)
    st.add_argument("--tolerance", type=float, default=0.1, help="nats above the first loss that diverge")
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
    st.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    _data_arguments(st, batches=False)
    for parser, name in ((g, "grads"), (s, "gains"), (st, "stability")):
        add_output_file(parser, default=f"{name}.png", help=f"PNG path; JSON beside it (default {name}.png)")
        parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")


def _data_arguments(p: argparse.ArgumentParser, batches: bool) -> None:
    p.add_argument("--data", metavar="FILE", help="text file or folder (default: the embedded corpus)")
    p.add_argument(
        "--tokenizer",
        help="tokenizer.json, or GPT-2's BPE folder for a fairseq .pt with a dict.txt "
        "(default: the checkpoint's, else a BPE trained on the data)",
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=1, help="data order and preset initialisation")
    if batches:
        p.add_argument("--batches", type=int, default=4, help="batches to average over (default 4)")


def analyze(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the analysis ``args.analysis`` with ``args`` (the options ``add_arguments`` defines); writes
    its PNG to ``args.output`` and its JSON beside it; returns the result."""
    check_output_file(args.output, "--output")  # before any work
    if not args.output.endswith(".png"):
        raise ConfigError(f"--output {args.output}: expected a .png path (the JSON is written beside it)")
    result = {"grads": run_grads, "gains": run_gains, "stability": run_stability}[args.analysis](args)
    from . import figures

    atomic_write_json(json_path(args.output), result)
    getattr(figures, f"plot_{args.analysis}")(result, args.output)
    return result


def json_path(png: str) -> str:
    """Returns where the JSON of the analysis whose PNG is ``png`` is written."""
    return os.path.splitext(png)[0] + ".json"


def run_grads(args: argparse.Namespace) -> dict[str, Any]:
    from ..engine.grad_stats import GAIN_KINDS, WEIGHT_KINDS
    from .grads import grads_at, grads_result
    from .inputs import check_data_args, check_model_spec
    from .recorder import check_run, read_run

    if not args.runs and not args.ckpt:
        raise ConfigError("analyze grads: give RUN dirs (trained with --grad-stats) and/or --ckpt PATH")
    for run_dir in args.runs:
        check_run(run_dir)
    for spec in args.ckpt:
        check_model_spec(spec)
    check_data_args(args.data, args.tokenizer)
    if args.batches < 1:
        raise ConfigError(f"--batches {args.batches}: expected a positive integer")
    if args.kind not in WEIGHT_KINDS + GAIN_KINDS:
        raise ConfigError(f"--kind {args.kind}: expected one of {WEIGHT_KINDS + GAIN_KINDS}")
    entries = [read_run(r) for r in args.runs]
    data_fingerprints = {}
    for spec in args.ckpt:
        target, batches, data_fp = _target_and_batches(spec, args)
        values = grads_at(target, batches, args.batches, args.batch_size)
        info = {**target.info, "data_fingerprint": data_fp, "batches": args.batches}
        entries.append({"name": target.name, "info": info, "values": values})
        data_fingerprints[target.name] = data_fp
    result = grads_result(entries, args.kind, args.baseline)
    settings = {
        k: getattr(args, k) for k in ("batches", "batch_size", "seq_len", "seed", "data", "tokenizer")
    }
    result["settings"] = settings
    result["provenance"] = provenance(seed=args.seed, data_fingerprint=data_fingerprints or None)
    return result


def _target_and_batches(spec: str, args: argparse.Namespace) -> tuple[Any, Any, str]:
    """Returns (target, its batches, data fingerprint) for a --ckpt spec."""
    from .inputs import batches, check_vocab, load_target, token_data

    target = load_target(spec, args.seed, args.fairseq_head_scale_bug, args.tokenizer, args.fairseq_dict)
    cfg = target.model.cfg
    tokens, tok = token_data(args.data, target.tokenizer or args.tokenizer, cfg.vocab_size)
    tok_vocab = tok.get_vocab_size()
    check_vocab(target.name, cfg.vocab_size, tok_vocab)
    seq_len = min(args.seq_len, cfg.max_seq_len)
    return target, batches(tokens, tok_vocab, seq_len, args.seed), tokens.fingerprint


def run_gains(args: argparse.Namespace) -> dict[str, Any]:
    from .gains import read_gains
    from .inputs import check_model_spec, load_target

    for spec in args.targets:
        check_model_spec(spec)
    models = []
    for spec in args.targets:
        target = load_target(spec, fairseq_head_scale_bug=args.fairseq_head_scale_bug)
        models.append({"name": target.name, "info": target.info, "gains": read_gains(target.model, spec)})
    return {"analysis": "gains", "models": models, "provenance": provenance()}


def run_stability(args: argparse.Namespace) -> dict[str, Any]:
    from ..engine.config import parse_preset, preset
    from .inputs import batches, check_data_args, token_data
    from .stability import StabilitySettings, stability_test

    for name in args.preset:
        try:
            parse_preset(name)
        except ValueError as e:
            raise ConfigError(f"--preset: {e}") from None
    if args.seeds < 1:
        raise ConfigError(f"--seeds {args.seeds}: expected a positive integer")
    from ..engine.train_config import parse_set

    flags = ("updates", "lr_start", "lr_end", "batch_size", "seq_len", "tolerance", "autocast", "device")
    settings = StabilitySettings(**{f: getattr(args, f) for f in flags})
    settings.validate()
    overrides = parse_set(args.set)
    check_data_args(args.data, args.tokenizer)
    vocab = min(preset(name).vocab_size for name in args.preset)
    tokens, tok = token_data(args.data, args.tokenizer, vocab)
    tok_vocab = tok.get_vocab_size()
    configs = {
        name: preset(
            name,
            **{
                **overrides,
                "vocab_size": max(-(-tok_vocab // 64) * 64, 64),
                "pad_token_id": tokens.specials.pad,
            },
        )
        for name in args.preset
    }
    seq_len = min([settings.seq_len] + [c.max_seq_len for c in configs.values()])
    settings.seq_len = seq_len
    data = batches(tokens, tok_vocab, seq_len, args.seed)
    result = stability_test(configs, list(range(1, args.seeds + 1)), data, settings)
    result["data"] = {"source": args.data or "embedded default corpus", "fingerprint": tokens.fingerprint}
    result["model_overrides"] = overrides
    result["provenance"] = provenance(seed=args.seed, data_fingerprint=tokens.fingerprint)
    return result
