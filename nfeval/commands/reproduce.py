"""``nfeval reproduce``: the command line over ``nfeval.pipelines.reproduce``."""

from __future__ import annotations

import argparse

from ..base.cli_args import (
    add_device,
    add_no_progress,
    add_run_folder,
    add_zeroshot_data_dir,
    invoked_command,
)
from ..base.errors import ConfigError
from ..base.outputs import check_output_dir
from ..launch.options import add_launcher_arguments, launch_options
from ..pipelines.reproduce import ReproduceConfig, run_reproduce
from ..pipelines.reproduce.plan import EXPERIMENT_NAMES, PUBLIC_SCALES


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = ReproduceConfig()
    add_run_folder(p, d.out)
    p.add_argument(
        "--scale",
        default=d.scale,
        choices=PUBLIC_SCALES + ("smoke",),
        metavar="{tiny,small,125M}",
        help="tiny: the headline sections (--only fig2-clm,fig3-5) in about 40 min on one quiet CPU core, "
        "every causal-LM section in about 2 h at --seeds 3; small: many hours; 125M: GPUs (writes the "
        "torchrun commands when none is present)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        help="a time budget per run in minutes, the paper's equal-time protocol (default: the scale's "
        "step budget; see plan.py on time budgets under a changing machine load)",
    )
    p.add_argument("--seeds", type=int, help="seeds per training run (default: the scale's); mean ± std")
    p.add_argument("--only", help=f"comma-separated experiments to run: {','.join(EXPERIMENT_NAMES)}")
    add_zeroshot_data_dir(p)
    p.add_argument("--glue-dir", help="GLUE TSVs (layout of ../shared/data/glue); enables Table 3")
    p.add_argument(
        "--glue-tasks", help="comma-separated GLUE tasks (default: every task whose files are in --glue-dir)"
    )
    p.add_argument(
        "--no-tune",
        dest="tune",
        action="store_false",
        help="train every run at the scale's one LR instead of first tuning each architecture's LR with "
        "nfeval tune (the scale's grid and budget; tiny: 3 presets x 7 LRs x 1000 steps, about 18 minutes); "
        "every verdict then says untuned",
    )
    p.add_argument("--tune", dest="tune", action="store_true", help=argparse.SUPPRESS)  # the default, kept
    add_device(p, default=d.device)
    add_no_progress(p)
    add_launcher_arguments(p)


def _names(text: str | None, flag: str) -> tuple[str, ...] | None:
    """Returns the comma-separated names of ``flag`` (None when not given); an empty list is refused."""
    if text is None:
        return None
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise ConfigError(f"{flag} {text!r}: empty selection; name at least one, or drop the flag")
    return names


def run(args: argparse.Namespace) -> int:
    launch = launch_options(args)
    check_output_dir(args.out, "--out")  # before any work
    cfg = ReproduceConfig(
        out=args.out,
        scale=args.scale,
        minutes=args.minutes,
        seeds=args.seeds,
        only=_names(args.only, "--only"),
        data_dir=args.data_dir,
        glue_dir=args.glue_dir,
        glue_tasks=_names(args.glue_tasks, "--glue-tasks"),
        tune=args.tune,
        device=args.device,
        progress=not args.no_progress,
        command=invoked_command(),
        launch=launch,
    )
    result = run_reproduce(cfg)
    print(result.get("report") or result.get("commands") or result["pending"])
    return 0
