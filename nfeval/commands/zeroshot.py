"""``nfeval zeroshot``: the command line over ``nfeval.zeroshot.evaluate``."""

from __future__ import annotations

import argparse
import time

from .. import embedded
from .. import tasks as nf_tasks
from ..base.cli_args import (
    add_device,
    add_dtype,
    add_limit,
    add_no_progress,
    device_or_none,
    positive_int,
    positive_int_or_auto,
)
from ..base.errors import ConfigError
from ..base.outputs import check_output_dir, check_output_file
from ..model_adapters.config import ScoringConfig
from ..zeroshot.config import ZeroShotConfig
from ..zeroshot.evaluate import evaluate, make_table

DEFAULT_OUTPUT = "results/zeroshot.json"


def _add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--tasks`` and ``--data-dir``, their help read from the task records (tasks/registry.py)."""
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help=f"tasks (comma or space separated): {' '.join(nf_tasks.NAMES)}, or any registered "
        f"lm-eval task (default: {' '.join(nf_tasks.DEFAULT_TASKS)})",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help=f"local task files (layout of ../shared/data/zeroshot), or 'embedded': the "
        f"{embedded.ZEROSHOT_ROWS}-item slices of {nf_tasks.join_titles(embedded.ZEROSHOT_TASKS)} shipped "
        f"in the package (not {nf_tasks.join_titles(nf_tasks.USER_SUPPLIED)}: the licence forbids "
        "redistribution); default: the Hub",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``nfeval zeroshot``'s options."""
    parser.add_argument(
        "--ckpt",
        required=True,
        help="nfeval run/checkpoint dir, a Hugging Face causal-LM dir, or a fairseq checkpoint file "
        "(with dict.txt beside it and --tokenizer GPT-2's BPE folder, or a tokenizer.json beside it)",
    )
    _add_task_arguments(parser)
    add_limit(parser, "documents of each task")
    parser.add_argument(
        "--batch-size",
        type=positive_int_or_auto,
        default=16,
        help="rows per forward (a row packs many requests), or auto: bounded by --max-batch-tokens only",
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        help="padded tokens per forward (default 8192; bounds memory)",
    )
    parser.add_argument(
        "--output",
        help=f"results JSON, with its per-item F.items.json beside it (default: {DEFAULT_OUTPUT} unless "
        "--output_path is given)",
    )
    parser.add_argument(
        "--output_path",
        "--output-path",
        metavar="DIR",
        help="write lm-eval's layout instead: DIR/<model>/results_<date>.json, nfeval's block inside",
    )
    parser.add_argument(
        "--log_samples",
        "--log-samples",
        action="store_true",
        help="with --output_path: also lm-eval's samples_<task>_<date>.jsonl (what compare-scores pairs on)",
    )
    _run_arguments(parser)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds where and how the model runs (device, dtype, context window, cache, progress) and how its
    checkpoint is read (trusted pickles, a Hugging Face model's forward, fairseq files)."""
    from ..engine.checkpoints import torch_files
    from ..engine.text.fairseq_tokenizer import add_fairseq_arguments

    add_device(parser)
    add_dtype(parser, ("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument(
        "--max-length", type=positive_int, default=None, help="context window (default: the model's)"
    )
    parser.add_argument("--no-cache", action="store_true", help="ignore and do not write the results cache")
    add_no_progress(parser)
    parser.add_argument("--trust-checkpoint", action="store_true", help=torch_files.TRUST_HELP)
    parser.add_argument(
        "--hf-forward",
        choices=("engine", "transformers"),
        default="engine",
        help="a Hugging Face GPT-2 directory: nfeval's engine when it reproduces the model (default), "
        "or transformers' own forward (to cross-check; cached apart)",
    )
    add_fairseq_arguments(parser)


def _process_age() -> float:
    """Returns the seconds since this process started (interpreter start-up and imports included)."""
    try:
        import psutil
    except ImportError:  # psutil comes with accelerate; without it the command is timed from here
        return 0.0
    return max(0.0, time.time() - psutil.Process().create_time())


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval zeroshot``; prints the table and where the results went."""
    if not args.output and not args.output_path:
        args.output = DEFAULT_OUTPUT
    check_output_file(args.output, "--output")  # before any work
    if args.output_path:
        check = check_output_file if args.output_path.endswith(".json") else check_output_dir
        check(args.output_path, "--output_path")
    task_list = [t for item in args.tasks for t in item.split(",") if t.strip()] if args.tasks else None
    if args.tasks is not None and not task_list:
        raise ConfigError(f"--tasks {' '.join(args.tasks)!r}: empty selection; name at least one task")
    scoring = ScoringConfig(
        device=device_or_none(args.device),
        dtype=args.dtype,
        batch_size=args.batch_size,
        max_batch_tokens=args.max_batch_tokens,
        max_length=args.max_length,
        hf_forward=args.hf_forward,
        progress=not args.no_progress,
    )
    reading = ("trust_checkpoint", "tokenizer", "fairseq_dict", "fairseq_head_scale_bug")
    cfg = ZeroShotConfig(
        tasks=task_list,
        data_dir=args.data_dir,
        limit=args.limit,
        output=args.output,
        output_path=args.output_path,
        log_samples=args.log_samples,
        use_cache=not args.no_cache,
        scoring=scoring,
        **{name: getattr(args, name) for name in reading},
    )
    out = evaluate(args.ckpt, cfg, started=time.perf_counter() - _process_age())
    if out is not None:
        print(make_table(out))
        if args.output:
            print(f"results: {args.output}")
    return 0
