"""The ``nfeval`` command. Thin: picks a subcommand, lets its module add arguments, calls its ``run``.

Each subcommand lives in its own module with two functions: ``add_arguments(parser)`` and
``run(args) -> int``. Only the chosen module is imported, so ``nfeval info`` does not pay for lm-eval.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .base.errors import UserError

COMMANDS: dict[str, tuple[str, str]] = {
    "info": (
        "nfeval.commands.info",
        "architecture, parameter counts and fingerprint of a checkpoint or preset",
    ),
    "train": ("nfeval.engine.train", "pretrain a causal or masked LM under a compute budget"),
    "zeroshot": ("nfeval.zeroshot.evaluate", "score a checkpoint zero-shot through lm-evaluation-harness"),
    "generate": (
        "nfeval.commands.generate",
        "continue prompts with a checkpoint (batched, KV cache), write JSONL",
    ),
    "lm-eval": ("nfeval.commands.lm_eval", "lm-eval's own CLI with nfeval's model and tasks registered"),
    "tune": (
        "nfeval.tune.sweep",
        "pretraining learning-rate sweep per architecture: the best LR of each preset",
    ),
    "glue": ("nfeval.glue.sweep", "fine-tune on GLUE, sweeping learning rates"),
    "compare": ("nfeval.report.compare", "compute-matched comparison of training runs"),
    "compare-scores": ("nfeval.report.compare_scores", "paired significance of two results files"),
    "leaderboard": (
        "nfeval.report.leaderboard",
        "markdown/CSV/JSON leaderboard from zero-shot and GLUE results",
    ),
    "analyze": (
        "nfeval.commands.analyze",
        "the paper's analyses: gradient norms, learned gains, LR stability",
    ),
    "export-hf": ("nfeval.commands.export_hf", "export a causal LM as a Hugging Face model directory"),
    "demo": ("nfeval.pipelines.demo", "the whole pipeline, offline, on the embedded default corpus"),
    "reproduce": (
        "nfeval.pipelines.reproduce",
        "the paper's tables and figures from one command, at the scale the hardware allows",
    ),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """Returns the parser; only ``command``'s module is imported to add its arguments."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="nfeval", description="NormFormer evaluation and benchmarking harness"
    )
    parser.add_argument("--version", action="version", version=f"nfeval {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command == "lm-eval":  # everything after it belongs to lm-eval's own parser
        return importlib.import_module(COMMANDS[command][0]).main(argv[argv.index(command) + 1 :])
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
    except UserError as e:  # any other exception is a bug: its traceback shows
        if os.environ.get("NFEVAL_TRACEBACK") == "1":
            raise
        print(f"nfeval {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2


def one_line(error: BaseException) -> str:
    """Returns the error's message on one line (a user error is reported as exactly one line)."""
    return " ".join(str(error).split())


if __name__ == "__main__":
    raise SystemExit(main())
