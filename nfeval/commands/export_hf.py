"""``nfeval export-hf RUN_OR_CKPT --out DIR``: a Hugging Face model directory of a causal LM.

GPT-2-shaped models become transformers' own ``GPT2LMHeadModel``; every other architecture becomes
remote code generated from nfeval's model (see ``nfeval.engine.interop.hf_export``).
"""

from __future__ import annotations

import argparse
import json

from ..base.outputs import check_output_dir
from ..engine.interop.hf_export import export_hf


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source", metavar="RUN_OR_CKPT", help="nfeval run/checkpoint dir, or a fairseq checkpoint file"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the Hugging Face model directory to write")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="tokenizer.json (or a folder with one) whose ids are the model's; default: the checkpoint's "
        "(fairseq checkpoints carry none, and are exported without one)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it already holds files")
    p.add_argument(
        "--fairseq-head-scale-bug",
        action="store_true",
        help="fairseq checkpoint trained before 2021-11-03: reproduce its HeadScale channel transposition",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out")  # before any work
    summary = export_hf(
        args.source,
        args.out,
        tokenizer=args.tokenizer,
        overwrite=args.overwrite,
        fairseq_head_scale_bug=args.fairseq_head_scale_bug,
    )
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    rows = {
        "out": summary["out"],
        "format": f"{summary['format']} ({summary['class']})",
        "trust_remote_code": summary["trust_remote_code"],
        "not GPT-2 because": ", ".join(summary["not_gpt2_because"]) or "—",
        "tokenizer": "yes" if summary["tokenizer"] else "none (pass --tokenizer)",
        "source": summary["source"]["path"],
        "fingerprint": summary["source"]["fingerprint"],
        "max |logit diff|": f"{summary['max_abs_logit_diff']:.2e}",
        "lm-eval model_args": summary["lm_eval_model_args"],
        "files": " ".join(summary["files"]),
    }
    width = max(map(len, rows))
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")
    return 0
