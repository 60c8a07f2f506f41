"""``nfeval glue``: the command line over ``nfeval.glue.sweep``."""

from __future__ import annotations

import argparse
import os

from .. import embedded
from ..base.cli_args import (
    add_device,
    add_dtype,
    add_limit,
    add_no_progress,
    device_or_none,
    learning_rates,
    positive_int,
)
from ..base.outputs import check_output_dir
from ..engine.checkpoints import torch_files
from ..glue import data as glue_data
from ..glue import submission as glue_submission
from ..glue.points import lr_key
from ..glue.recipe import DTYPES, SELECTIONS, Recipe
from ..glue.summary import format_table
from ..glue.sweep import DEFAULT_LRS, sweep
from ..launch.options import add_launcher_arguments, launch_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the ``nfeval glue`` options."""
    p.add_argument("--ckpt", required=True, help="nfeval run or checkpoint directory (masked or causal LM)")
    p.add_argument(
        "--glue-dir",
        help="folder with the GLUE distribution TSVs (CoLA/, SST-2/, ...), or 'embedded': the STS-B slice "
        f"shipped in the package (400 train, 200 dev rows); default: the hub copy {glue_data.HUB_DATASET}",
    )
    p.add_argument(
        "--tasks",
        help=f"comma-separated tasks (default all: {','.join(glue_data.TASKS)}; with --glue-dir embedded: "
        f"{','.join(embedded.GLUE_TASKS)})",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="sweep the learning-rate grid (default grid: "
        + ", ".join(lr_key(x) for x in DEFAULT_LRS)
        + "); without it: fairseq's recipe LR per task",
    )
    p.add_argument("--lrs", type=learning_rates, help="comma-separated learning rates (overrides the grid)")
    p.add_argument(
        "--seeds", type=positive_int, default=1, help="seeds per learning rate: 0 .. N-1 (default 1)"
    )
    p.add_argument(
        "--batch-size", type=positive_int, help="default: 32 for MNLI/QNLI/QQP/SST-2, 16 for the others"
    )
    for flag, kind, what in (
        ("--epochs", positive_int, "epochs per point"),
        ("--eval-batch-size", positive_int, "dev batch size"),
        ("--max-len", positive_int, "max tokens per input (capped at the model's)"),
        ("--warmup-ratio", float, "share of updates with linear warmup"),
        ("--weight-decay", float, "AdamW weight decay"),
        ("--dropout", float, "dropout and attention dropout"),
    ):
        default = getattr(Recipe, flag[2:].replace("-", "_"))
        p.add_argument(flag, type=kind, default=default, help=f"{what} (default {default})")
    p.add_argument(
        "--select",
        choices=SELECTIONS,
        default=Recipe.select,
        help="which epoch a point reports (default: the best on dev, as fairseq)",
    )
    add_dtype(p, DTYPES, default=Recipe.dtype, help="auto (default): bf16 on GPUs that support it")
    add_device(p)
    p.add_argument(
        "--jobs", type=positive_int, default=1, help="points run in parallel processes (spread over GPUs)"
    )
    add_limit(p, "rows of each task's train and dev splits, for quick tries (recorded)")
    p.add_argument("--out", default="results", help="results folder (default: results)")
    add_no_progress(p)
    p.add_argument("--trust-checkpoint", action="store_true", help=torch_files.TRUST_HELP)
    add_launcher_arguments(p)
    p.add_argument(
        "--predict-test",
        action="store_true",
        help="write the GLUE server's submission files (OUT/glue/submission/*.tsv) from each task's "
        "best-LR model; needs --glue-dir with the test files",
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval glue``: the sweep, then prints the table and where the summary is."""
    launch = launch_options(args)
    check_output_dir(args.out, "--out")  # before any work
    glue_dir = embedded.glue_dir(args.glue_dir)  # "embedded": the slice shipped in the package
    default = embedded.GLUE_TASKS if args.glue_dir == embedded.NAME else glue_data.TASKS
    tasks = [t.strip().lower() for t in (args.tasks or ",".join(default)).split(",") if t.strip()]
    for t in tasks:
        glue_data.spec(t)
    lrs = args.lrs if (args.lrs or args.sweep) else {t: [glue_data.SPECS[t].fairseq_lr] for t in tasks}
    flags = "epochs batch_size eval_batch_size max_len warmup_ratio weight_decay select dtype".split()
    recipe = Recipe(**{f: getattr(args, f) for f in flags}, dropout=args.dropout, attn_dropout=args.dropout)
    if args.predict_test:
        glue_submission.check_test_files(tasks, glue_dir)
    summary = sweep(
        args.ckpt,
        tasks,
        lrs,
        seeds=args.seeds,
        out_dir=args.out,
        glue_dir=glue_dir,
        recipe=recipe,
        jobs=args.jobs,
        device=device_or_none(args.device),
        progress=not args.no_progress,
        trust_checkpoint=args.trust_checkpoint,
        launch=launch,
        limit=args.limit,
    )
    if summary is None:
        print("nfeval glue: no point finished yet; rerun the same command to collect the jobs' results")
        return 0
    print(format_table(summary))
    print(f"summary: {os.path.join(args.out, 'glue.json')}")
    if args.predict_test:
        print(f"submission: {glue_submission.write_submission(args.out, summary, tasks, glue_dir)}")
    return 0
