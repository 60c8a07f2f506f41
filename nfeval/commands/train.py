"""``nfeval train``: the command line over ``nfeval.engine.training.train``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..base.jsonio import load_json
from ..base.outputs import check_output_dir
from ..engine.training.parallel import launched_rank, leave_process_group
from ..engine.training.train import finished_summary, refuse_existing_run, train
from ..engine.training.train_config import TrainConfig
from ..engine.training.train_flags import add_config_flags, config_from_args
from ..engine.training.trainer import TrainingDiverged
from ..launch.options import RUN, LaunchOptions, add_launcher_arguments, launch_options
from ..tune.results import with_tuned_lr


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the run's flags and the launcher's (``--launcher slurm --nodes N --gpus-per-node G``)."""
    add_run_arguments(p)
    add_launcher_arguments(p, kind=RUN)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the run's own flags: run folder, config, resume, tuned LR, and one flag per TrainConfig field."""
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--config", help="JSON file of TrainConfig fields; command-line flags override it")
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its newest valid checkpoint"
    )
    p.add_argument(
        "--override-resume",
        action="store_true",
        help="with --resume: take changed budget/optimizer/interval flags (e.g. --max-steps, --lr) "
        "instead of refusing",
    )
    p.add_argument(
        "--lr-from",
        dest="tune_json",
        metavar="TUNE_JSON",
        help="train at --preset's tuned LR from `nfeval tune`'s tune.json (recorded in config.json)",
    )
    add_config_flags(p)


def given_fields(args: argparse.Namespace) -> set[str]:
    """Returns the TrainConfig fields the command line (flags, --config, --set) sets explicitly."""
    names = {n for n in vars(TrainConfig()) if getattr(args, n, None) is not None}
    if args.config:
        names |= set(load_json(args.config))
    return names


def run(args: argparse.Namespace) -> int:
    """Trains here (under torchrun: this process's share), or submits the run as one Slurm job."""
    check_output_dir(args.out, "--out")  # before any work
    launch = launch_options(args)
    if launch.on_cluster:
        return submit(args, launch)
    return train_here(args)


def submit(args: argparse.Namespace, launch: LaunchOptions) -> int:
    """Submits the run as a job of ``--nodes`` × ``--gpus-per-node`` processes (DDP, or FSDP2 with
    ``--fsdp``), requeued with ``--resume`` after preemption; returns its exit status (0 with
    ``--no-wait``, 1 when the job did not finish). Rerun, the same command collects the submitted run:
    nothing when it finished, its job while queued or running, else a job that resumes it."""
    from ..launch import cluster, records

    config_from_args(args)  # bad flags fail here, before anything is submitted
    summary = finished_summary(args.out)
    if summary is not None:
        print(json.dumps(summary, indent=2))
        return 0
    if os.path.isfile(os.path.join(args.out, records.RECORD)):  # submitted from here before
        args = argparse.Namespace(**{**vars(args), "resume": True})
    elif not args.resume:
        refuse_existing_run(args.out)
    requeue = argparse.Namespace(**{**vars(args), "resume": True})
    status = cluster.run_training(train_here, args, requeue, args.out, launch, args.progress is not False)
    if not launch.wait:
        return 0
    if status is None:
        return 1
    print(f"nfeval train: the job ended with status {status}; run folder {args.out}")
    return status


def train_here(args: argparse.Namespace) -> int:
    """Trains in this process (one of torchrun's or a Slurm job's); returns the exit status (3:
    diverged)."""
    cfg = config_from_args(args)
    if getattr(args, "tune_json", None):
        cfg = with_tuned_lr(cfg, args.tune_json, lr_given=args.lr is not None)
    try:
        summary = train(cfg, args.out, args.resume, args.override_resume, given_fields(args))
    except TrainingDiverged as e:
        print(f"nfeval train: {e}", file=sys.stderr)
        return 3
    finally:
        leave_process_group()
    if launched_rank() == 0:
        print(json.dumps(summary, indent=2))
    return 0
