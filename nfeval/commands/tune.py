"""``nfeval tune``: the command line over ``nfeval.tune.sweep``."""

from __future__ import annotations

import argparse
import os

from ..base import config_flags
from ..base.errors import ConfigError
from ..base.outputs import check_output_dir
from ..engine.training.train_flags import config_from_args
from ..launch.options import add_launcher_arguments, launch_options
from ..tune import results as tune_results
from ..tune.config import TuneConfig
from ..tune.sweep import parse_budget, tune
from . import train as train_command

# nfeval train's flags a tune sets itself (hidden here; giving one is an error saying what to do)
SET_BY_TUNE = {
    "--lr": "a tune sets the LR per point: use --lrs",
    "--lr-from": "a tune sets the LR per point: use --lrs",
    "--lr-record": "a tune sets the LR per point: use --lrs",
    "--max-steps": "use --budget steps=N",
    "--max-tokens": "use --budget tokens=N",
    "--max-flops": "use --budget flops=X",
    "--max-seconds": "use --budget seconds=X",
    "--resume": "a tune always resumes its finished and killed points: drop it",
}


def _hidden(flag: str) -> str:
    return "set_by_tune_" + flag.strip("-").replace("-", "_")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval train``'s data, batch, model and optimiser flags (the same for every point), then the
    tune's own, which replace train's --preset and --out and hide the flags a tune sets per point."""
    train_command.add_run_arguments(p)
    add_launcher_arguments(p)
    p.conflict_handler = "resolve"  # the group below inherits it: its flags replace train's of the same name
    g = p.add_argument_group("tune")
    for flag in SET_BY_TUNE:
        g.add_argument(flag, nargs="?", const=True, dest=_hidden(flag), help=argparse.SUPPRESS)
    config_flags.add_config_flags(g, TuneConfig)


def tune_config(args: argparse.Namespace) -> TuneConfig:
    """Returns the TuneConfig of ``nfeval tune``'s parsed flags, with the launcher's options."""
    return config_flags.config_from_args(args, TuneConfig, launch=launch_options(args))


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval tune``: the points, then prints the table and where tune.json and the plot are."""
    cfg = tune_config(args)
    check_output_dir(cfg.out, "--out")  # before any work
    for flag, what_to_do in SET_BY_TUNE.items():
        if getattr(args, _hidden(flag)) is not None:
            raise ConfigError(f"{flag}: not a tune flag; {what_to_do}")
    field, value = parse_budget(cfg.budget)  # each point's budget; the base config needs one to be valid
    base = config_from_args(argparse.Namespace(**{**vars(args), "preset": None, field: value}))
    summary = tune(
        base,
        cfg.preset,
        cfg.lrs,
        cfg.budget,
        cfg.out,
        seeds=cfg.seeds,
        jobs=cfg.jobs,
        progress=base.progress,
        report_only=cfg.report_only,
        launch=cfg.launch,
    )
    print(tune_results.format_table(summary))
    plot = os.path.join(cfg.out, "tune.png")
    print(f"summary: {os.path.join(cfg.out, 'tune.json')}" + (f"  plot: {plot}" if summary["points"] else ""))
    return 0
