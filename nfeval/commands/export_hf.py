"""``nfeval export-hf RUN_OR_CKPT --out DIR``: a Hugging Face model directory of a causal LM.

GPT-2-shaped models become transformers' own ``GPT2LMHeadModel``; every other architecture becomes
remote code generated from nfeval's model (see ``nfeval.engine.interop.hf_export``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..base.outputs import check_output_dir
from ..engine.interop.hf_export import export_hf
from ..engine.text.fairseq_tokenizer import HEAD_SCALE_BUG_HELP


@dataclass(frozen=True)
class ExportOptions:
    """``nfeval export-hf``'s flags (``base.config_flags``): the folder to write, the tokenizer to put in it,
    whether to replace a folder with files, the fairseq HeadScale fix, and JSON output."""

    out: str = flag_field(help="the Hugging Face model directory to write", required=True, metavar="DIR")
    tokenizer: str | None = flag_field(
        None,
        "tokenizer.json (or a folder with one) whose ids are the model's; default: the checkpoint's "
        "(fairseq checkpoints carry none, and are exported without one)",
        metavar="PATH",
    )
    overwrite: bool = flag_field(False, "replace DIR if it already holds files", action="store_true")
    fairseq_head_scale_bug: bool = flag_field(False, HEAD_SCALE_BUG_HELP, action="store_true")
    json: bool = flag_field(False, "print the summary as JSON instead of a table", action="store_true")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval export-hf``'s source and ExportOptions' flags."""
    p.add_argument(
        "source", metavar="RUN_OR_CKPT", help="nfeval run/checkpoint dir, or a fairseq checkpoint file"
    )
    add_config_flags(p, ExportOptions)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval export-hf``: writes the folder and prints its summary."""
    opts = config_from_args(args, ExportOptions)
    check_output_dir(opts.out, "--out")  # before any work
    summary = export_hf(
        args.source,
        opts.out,
        tokenizer=opts.tokenizer,
        overwrite=opts.overwrite,
        fairseq_head_scale_bug=opts.fairseq_head_scale_bug,
    )
    if opts.json:
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
