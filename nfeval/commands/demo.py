"""``nfeval demo``: the command line over ``nfeval.pipelines.demo``."""

from __future__ import annotations

import argparse
import os

from ..base.cli_args import add_device, add_no_progress, add_run_folder, add_zeroshot_data_dir
from ..base.errors import ConfigError, MissingDataError
from ..base.outputs import check_output_dir
from ..pipelines.demo import DemoConfig, run_demo


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DemoConfig()
    add_run_folder(p, d.out)
    p.add_argument(
        "--minutes",
        type=float,
        default=d.minutes,
        help=f"time target for the whole demo (default {d.minutes:g})",
    )
    p.add_argument("--size", default=d.size, choices=("tiny", "small"), help="model size preset")
    add_zeroshot_data_dir(p)
    p.add_argument("--glue-dir", help="GLUE TSVs (layout of ../shared/data/glue); enables the GLUE sweep")
    p.add_argument(
        "--glue-tasks",
        default=",".join(d.glue_tasks),
        help=f"comma-separated GLUE tasks (default {','.join(d.glue_tasks)})",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=d.zeroshot_limit,
        help=f"zero-shot items per task (default {d.zeroshot_limit}; 0 = all)",
    )
    add_device(p, default=d.device)
    p.add_argument("--seed", type=int, default=d.seed)
    add_no_progress(p)


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out")  # before any work
    if args.minutes <= 0:
        raise ConfigError(f"--minutes {args.minutes}: expected a positive number")
    cfg = DemoConfig(
        out=args.out,
        minutes=args.minutes,
        size=args.size,
        data_dir=args.data_dir,
        glue_dir=args.glue_dir,
        glue_tasks=tuple(t.strip() for t in args.glue_tasks.split(",") if t.strip()),
        zeroshot_limit=args.limit or None,
        device=args.device,
        seed=args.seed,
        progress=not args.no_progress,
    )
    for name in ("data_dir", "glue_dir"):
        path = getattr(cfg, name)
        if path and not os.path.isdir(path):
            raise MissingDataError(f"--{name.replace('_', '-')} {path}: no such folder")
    run_demo(cfg)
    return 0
