"""``nfeval bakeoff``: the command line over ``nfeval.pipelines.bakeoff``."""

from __future__ import annotations

import argparse

from .. import embedded
from ..base.cli_args import (
    add_device,
    add_no_progress,
    add_pipeline_jobs,
    add_render_only,
    add_run_folder,
    add_tune_seeds,
    add_zeroshot_data_dir,
    invoked_command,
    learning_rates,
)
from ..launch.local import use_threads
from ..launch.options import add_launcher_arguments, launch_options
from ..pipelines.bakeoff import RECIPES, BakeoffConfig, run_bakeoff
from ..pipelines.scales import SCALES


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval bakeoff``'s options: what is ranked, the data, the runs' budget and seeds, the tune,
    and where and how it runs."""
    d = BakeoffConfig()
    _ranked_arguments(p, d)
    add_run_folder(p, d.out)
    p.add_argument("--train-data", help="training text file or folder (default: the embedded corpus)")
    p.add_argument("--valid-data", help="validation text (default: a fixed 5%% split of --train-data)")
    _budget_arguments(p, d)
    _tune_arguments(p, d)
    add_pipeline_jobs(p, d.jobs)
    add_render_only(p)
    add_zeroshot_data_dir(p)
    add_device(p, default=d.device)
    add_no_progress(p)
    add_launcher_arguments(p)


def _ranked_arguments(p: argparse.ArgumentParser, d: BakeoffConfig) -> None:
    """Adds what is ranked: ``--archs``, ``--baseline`` and ``--size``."""
    p.add_argument(
        "--archs",
        nargs="+",
        default=list(d.archs),
        metavar="ARCH",
        help="architectures to rank: presets (prenorm, normformer, sandwich, olmo2norm, deepnorm, qknorm, "
        "rmsprenorm, periln, lnscaling, mixln, dyt, ...) or NAME=ARCH:FIELD=VALUE,... for a variant (e.g. "
        "olmo2qk=olmo2norm:qk_norm=true); "
        f"default: {' '.join(d.archs)}",
    )
    p.add_argument(
        "--baseline",
        default=d.baseline,
        help=f"the architecture the others are tested against (default {d.baseline})",
    )
    p.add_argument(
        "--size",
        default=d.size,
        choices=("tiny", "small", "125M", "smoke"),
        metavar="{tiny,small,125M}",
        help="preset size and its recipe (reproduce's scale of that name)",
    )


def _budget_arguments(p: argparse.ArgumentParser, d: BakeoffConfig) -> None:
    """Adds each run's budget, its seeds and its recipe's clipping."""
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps",
        type=int,
        help="the baseline's training steps; the others get the same time (default: the recipe's)",
    )
    budget.add_argument(
        "--minutes", type=float, help="a time budget per run instead (each run calibrates its steps)"
    )
    p.add_argument(
        "--seeds", type=int, default=d.seeds, help=f"training seeds per architecture (default {d.seeds})"
    )
    p.add_argument(
        "--close-seeds",
        type=int,
        default=d.close_seeds,
        help="seeds for the architectures within one MDE of the best after --seeds, and for the baseline "
        f"with them; decided once, recorded in seed_plan.json (default {d.close_seeds}; at most --seeds: "
        "none get more)",
    )
    p.add_argument(
        "--clip-grad",
        type=float,
        default=d.clip_grad,
        metavar="NORM",
        help="clip every tune point's and run's gradient norm to NORM: a second recipe (one --out is one "
        "recipe; default 0: no clipping, the paper's)",
    )


def _tune_arguments(p: argparse.ArgumentParser, d: BakeoffConfig) -> None:
    """Adds the tune's LR grid, budget and seeds."""
    p.add_argument(
        "--lrs", type=learning_rates, help="comma-separated LR grid of the tune (default: the recipe's)"
    )
    p.add_argument("--tune-budget", help="budget of each tune point, as nfeval tune --budget, e.g. steps=100")
    add_tune_seeds(p, d.tune_seeds)


def run(args: argparse.Namespace) -> int:
    if args.render_only:
        import os

        from ..base.errors import MissingDataError
        from ..pipelines.bakeoff.report import rerender

        if not os.path.isfile(os.path.join(args.out, "report.json")):
            raise MissingDataError(f"--out {args.out}: no report.json to render (run nfeval bakeoff first)")
        print(rerender(args.out))
        return 0
    launch = launch_options(args)
    cfg = BakeoffConfig(
        archs=tuple(args.archs),
        baseline=args.baseline,
        size=args.size,
        out=args.out,
        train_data=args.train_data,
        valid_data=args.valid_data,
        steps=args.steps,
        minutes=args.minutes,
        seeds=args.seeds,
        close_seeds=args.close_seeds,
        lrs=tuple(args.lrs) if args.lrs else None,
        tune_budget=args.tune_budget,
        tune_seeds=args.tune_seeds,
        jobs=args.jobs,
        clip_grad=args.clip_grad,
        data_dir=embedded.zeroshot_dir(args.data_dir),
        device=args.device,
        progress=not args.no_progress,
        command=invoked_command(),
        launch=launch,
    )
    use_threads(SCALES[RECIPES[cfg.size]].threads)  # this process's; the library leaves its caller's
    result = run_bakeoff(cfg)
    print(result.get("path") or result["pending"])
    return 0
