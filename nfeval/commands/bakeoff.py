"""``nfeval bakeoff``: the command line over ``nfeval.pipelines.bakeoff``."""

from __future__ import annotations

import argparse
import os

from ..base.cli_args import add_render_only, invoked_command
from ..base.config_flags import add_config_flags, config_from_args
from ..base.errors import MissingDataError
from ..launch.local import use_threads
from ..launch.options import add_launcher_arguments, launch_options
from ..pipelines.bakeoff import run_bakeoff
from ..pipelines.bakeoff.config import RECIPES, BakeoffConfig
from ..pipelines.bakeoff.report import rerender
from ..pipelines.scales import SCALES

# BakeoffConfig's flags in the order of the help: what is ranked and the data, the budget (one of two),
# the seeds, recipe and tune, then (after --render-only) the zero-shot data and the device
RANKED = "archs baseline size out train_data valid_data"
BUDGET = "steps minutes"
TUNE = "seeds close_seeds clip_grad lrs tune_budget tune_seeds jobs runs_per_gpu"
WHERE = "data_dir device progress reread"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval bakeoff``'s options: BakeoffConfig's flags (``base.config_flags``), ``--render-only``
    and the launcher's."""
    add_config_flags(p, BakeoffConfig, names=RANKED.split())
    add_config_flags(p.add_mutually_exclusive_group(), BakeoffConfig, names=BUDGET.split())
    add_config_flags(p, BakeoffConfig, names=TUNE.split())
    add_render_only(p)
    add_config_flags(p, BakeoffConfig, names=WHERE.split())
    add_launcher_arguments(p)


def bakeoff_config(args: argparse.Namespace) -> BakeoffConfig:
    """Returns the BakeoffConfig of ``nfeval bakeoff``'s parsed flags, with this command line and the
    launcher's options."""
    return config_from_args(args, BakeoffConfig, command=invoked_command(), launch=launch_options(args))


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval bakeoff`` (or, with ``--render-only``, rewrites its report.md); prints the report's
    path, or what to do while its Slurm jobs are not all finished."""
    if args.render_only:
        if not os.path.isfile(os.path.join(args.out, "report.json")):
            raise MissingDataError(f"--out {args.out}: no report.json to render (run nfeval bakeoff first)")
        print(rerender(args.out))
        return 0
    cfg = bakeoff_config(args)
    use_threads(SCALES[RECIPES[cfg.size]].threads)  # this process's; the library leaves its caller's
    result = run_bakeoff(cfg)
    print(result.get("path") or result["pending"])
    return 0
