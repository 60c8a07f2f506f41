"""``nfeval demo``: the command line over ``nfeval.pipelines.demo``."""

from __future__ import annotations

import argparse
import os

from .. import embedded
from ..base.cli_args import add_device, add_limit, add_no_progress, add_run_folder, positive_int
from ..base.errors import ConfigError, MissingDataError
from ..base.outputs import check_output_dir
from ..launch.local import use_threads
from ..pipelines.demo import DemoConfig, run_demo


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DemoConfig()
    add_run_folder(p, d.out)
    p.add_argument(
        "--minutes",
        type=float,
        default=d.minutes,
        help=f"time target for the whole demo (default {d.minutes:g}); sets Pre-LN's step budget from the "
        "step time measured before training, unless --steps does",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        help="Pre-LN's step budget (NormFormer's: this ÷ the paired step-time ratio); default: what "
        "--minutes buys",
    )
    p.add_argument("--size", default=d.size, choices=("tiny", "small"), help="model size preset")
    p.add_argument(
        "--data-dir",
        default=d.data_dir,
        help="zero-shot task files: 'embedded' (default: the 200-item slices shipped in the package) or a "
        "folder in the layout of ../shared/data/zeroshot",
    )
    p.add_argument(
        "--glue-dir",
        default=d.glue_dir,
        help="GLUE TSVs: 'embedded' (default: the STS-B slice shipped in the package), a folder in the "
        "layout of ../shared/data/glue, or 'none' to skip the GLUE stage",
    )
    p.add_argument(
        "--glue-tasks",
        default=",".join(d.glue_tasks),
        help=f"comma-separated GLUE tasks (default {','.join(d.glue_tasks)})",
    )
    add_limit(p, "zero-shot items of each public task", default=d.zeroshot_limit)
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=d.jobs,
        help=f"training runs at a time, one CPU thread each (default {d.jobs}; 2 is faster on an idle "
        "machine with two cores, slower on a busy one)",
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
        steps=args.steps,
        size=args.size,
        data_dir=args.data_dir,
        glue_dir=None if args.glue_dir in (None, "", "none") else args.glue_dir,
        glue_tasks=tuple(t.strip() for t in args.glue_tasks.split(",") if t.strip()),
        zeroshot_limit=args.limit,
        jobs=args.jobs,
        device=args.device,
        seed=args.seed,
        progress=not args.no_progress,
    )
    for name, resolve in (("data_dir", embedded.zeroshot_dir), ("glue_dir", embedded.glue_dir)):
        path = resolve(getattr(cfg, name))
        if path and not os.path.isdir(path):
            raise MissingDataError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: no such folder")
    import torch

    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        # Models this small run fastest on one thread, by far on a busy machine (a GLUE point of the
        # tiny preset: 41 s on two threads, 5 s on one, on the 2-core VM with other work on it).
        use_threads(1)
    run_demo(cfg)
    return 0
