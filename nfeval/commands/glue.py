"""``nfeval glue``: the command line over ``nfeval.glue.sweep``."""

from __future__ import annotations

import argparse
import dataclasses
import os

from .. import embedded
from ..base.config_flags import add_config_flags, config_from_args
from ..base.outputs import check_output_dir
from ..glue import data as glue_data
from ..glue import submission as glue_submission
from ..glue.config import GlueConfig
from ..glue.recipe import Recipe
from ..glue.summary import format_table
from ..glue.sweep import sweep
from ..launch.options import add_launcher_arguments, launch_options

RECIPE_FLAGS = "batch_size epochs eval_batch_size max_len warmup_ratio weight_decay dropout select dtype"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the ``nfeval glue`` options: GlueConfig's and Recipe's flags (``base.config_flags``)."""
    p.add_argument("--ckpt", required=True, help="nfeval run or checkpoint directory (masked or causal LM)")
    add_config_flags(p, GlueConfig, names=("glue_dir", "tasks", "sweep", "lrs", "seeds"))
    add_config_flags(p, Recipe, names=RECIPE_FLAGS.split())
    add_config_flags(
        p, GlueConfig, names=("device", "jobs", "limit", "out_dir", "progress", "trust_checkpoint")
    )
    add_launcher_arguments(p)
    p.add_argument(
        "--predict-test",
        action="store_true",
        help="write the GLUE server's submission files (OUT/glue/submission/*.tsv) from each task's "
        "best-LR model; needs --glue-dir with the test files",
    )


def glue_config(args: argparse.Namespace) -> GlueConfig:
    """Returns the GlueConfig of ``nfeval glue``'s parsed flags: ``--dropout`` sets the attention dropout
    too, ``--glue-dir embedded`` is the slice shipped in the package, and without ``--tasks`` every task
    of the GLUE folder runs."""
    recipe = config_from_args(args, Recipe)
    recipe = dataclasses.replace(recipe, attn_dropout=recipe.dropout)
    cfg = config_from_args(args, GlueConfig, recipe=recipe, launch=launch_options(args))
    tasks = embedded.GLUE_TASKS if cfg.glue_dir == embedded.NAME else glue_data.TASKS
    return dataclasses.replace(cfg, glue_dir=embedded.glue_dir(cfg.glue_dir), tasks=cfg.tasks or tasks)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval glue``: the sweep, then prints the table and where the summary is."""
    cfg = glue_config(args)
    check_output_dir(cfg.out_dir, "--out")  # before any work
    for t in cfg.tasks:
        glue_data.spec(t)
    if args.predict_test:
        glue_submission.check_test_files(cfg.tasks, cfg.glue_dir)
    summary = sweep(args.ckpt, cfg)
    if summary is None:
        print("nfeval glue: no point finished yet; rerun the same command to collect the jobs' results")
        return 0
    print(format_table(summary))
    print(f"summary: {os.path.join(cfg.out_dir, 'glue.json')}")
    if args.predict_test:
        print(
            f"submission: {glue_submission.write_submission(cfg.out_dir, summary, cfg.tasks, cfg.glue_dir)}"
        )
    return 0
