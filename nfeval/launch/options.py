"""The launcher flags every command with independent points shares, and their checked values."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil

from ..base.errors import ConfigError

LAUNCHERS = ("local", "slurm")
POINTS, RUN = "points", "run"  # a command of many independent points (one job each), or one training run


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Where and how a command's jobs run. ``executor`` is submitit's: ``slurm``, or ``local`` (the same
    job files run as subprocesses here, which is how the tests drive the Slurm path)."""

    launcher: str = "local"
    partition: str | None = None
    time_min: int = 240
    gpus_per_job: int = 1
    cpus_per_job: int | None = None
    array_parallelism: int | None = None
    max_requeues: int = 3
    sbatch_options: dict[str, str | bool] = dataclasses.field(default_factory=dict)
    wait: bool = True
    resubmit: bool = False
    nodes: int = 1
    gpus_per_node: int = 1
    executor: str = "slurm"
    poll_s: float = 10.0

    @property
    def on_cluster(self) -> bool:
        """Returns whether the jobs go through submitit (``--launcher slurm``)."""
        return self.launcher != "local"


def add_launcher_arguments(p: argparse.ArgumentParser, kind: str = POINTS) -> None:
    """Adds ``--launcher`` and the Slurm flags: per job for a command of independent ``POINTS``
    (``--gpus-per-job``, ``--array-parallelism``), per node for one training ``RUN`` (``--nodes``,
    ``--gpus-per-node``)."""
    g = p.add_argument_group("launcher")
    g.add_argument(
        "--launcher",
        default="local",
        metavar="{local,slurm}",
        help="local (default): this machine; slurm: submit the work as Slurm jobs (submitit)",
    )
    g.add_argument("--slurm-partition", help="Slurm partition to submit to (needed with --launcher slurm)")
    g.add_argument(
        "--slurm-time",
        default="4:00:00",
        help="time limit per job: minutes or [D-]HH:MM[:SS] (default 4:00:00); a job that reaches it "
        "is requeued and resumes from its checkpoint",
    )
    if kind == POINTS:
        g.add_argument("--gpus-per-job", type=int, default=1, help="GPUs per point's job (default 1)")
        g.add_argument(
            "--array-parallelism", type=int, help="most jobs of the array running at once (default: all)"
        )
    else:
        g.add_argument("--nodes", type=int, default=1, help="nodes of the Slurm job (default 1)")
        g.add_argument(
            "--gpus-per-node", type=int, default=1, help="GPUs per node, one process each (default 1)"
        )
    g.add_argument("--cpus-per-job", type=int, help="CPU cores per job (per process for a run)")
    g.add_argument(
        "--slurm-max-requeues",
        type=int,
        default=3,
        help="times a preempted or timed-out job is requeued (default 3)",
    )
    g.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other sbatch option, e.g. account=myproj or qos=high (repeatable)",
    )
    g.add_argument(
        "--no-wait", action="store_true", help="submit, print the job IDs and return; rerun to collect"
    )
    g.add_argument(
        "--resubmit",
        action="store_true",
        help="resubmit unfinished points whose recorded job's state cannot be known",
    )


def parse_minutes(text: str) -> int:
    """Returns the minutes of a Slurm time: ``90``, ``1:30:00``, ``2-00:00:00`` or ``30:00`` (MM:SS)."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise ConfigError(f"--slurm-time {text!r}: expected minutes or [D-]HH:MM[:SS], e.g. 4:00:00")
    days, first, second, third = (int(x) if x else 0 for x in match.groups())
    if match.group(3) is None and match.group(1) is None:
        minutes = first
    elif match.group(4) is None and match.group(1) is None:
        minutes = first + (second > 0)  # MM:SS, rounded up
    else:
        minutes = days * 1440 + first * 60 + second + (third > 0)
    if minutes < 1:
        raise ConfigError(f"--slurm-time {text!r}: expected at least one minute")
    return minutes


def _sbatch_options(pairs: list[str]) -> dict[str, str | bool]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"--slurm-option {pair!r}: expected KEY=VALUE, e.g. account=myproj")
        out[key] = value.strip() or True  # KEY= : a flag without a value, e.g. exclusive=
    return out


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """Returns the checked launcher flags of ``args``. A ConfigError (before anything is built or
    submitted) for an unknown launcher, ``slurm`` without sbatch or srun on PATH or without a partition, and
    values out of range."""
    launcher = str(args.launcher).strip().lower()
    if launcher not in LAUNCHERS:
        raise ConfigError(f"--launcher {args.launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    counts = {
        "--gpus-per-job": getattr(args, "gpus_per_job", 1),
        "--nodes": getattr(args, "nodes", 1),
        "--gpus-per-node": getattr(args, "gpus_per_node", 1),
        "--cpus-per-job": args.cpus_per_job,
        "--array-parallelism": getattr(args, "array_parallelism", None),
    }
    bad = [f"{flag} {n}" for flag, n in counts.items() if n is not None and n < 1]
    if args.slurm_max_requeues < 0:
        bad.append(f"--slurm-max-requeues {args.slurm_max_requeues}")
    if bad:
        raise ConfigError(f"{', '.join(bad)}: expected positive counts (requeues: 0 or more)")
    if launcher == "slurm":
        if shutil.which("sbatch") is None:
            raise ConfigError(
                "--launcher slurm: sbatch is not on PATH (run on a Slurm login node, or use --launcher local)"
            )
        if shutil.which("srun") is None:  # submitit starts every job's processes with srun
            raise ConfigError(
                "--launcher slurm: sbatch is on PATH but srun is not (each job's processes start with srun: "
                "run on a Slurm login node, or use --launcher local)"
            )
        if not args.slurm_partition:
            raise ConfigError("--launcher slurm: needs --slurm-partition NAME, the partition to submit to")
    return LaunchOptions(
        launcher=launcher,
        partition=args.slurm_partition,
        time_min=parse_minutes(args.slurm_time),
        gpus_per_job=counts["--gpus-per-job"],
        cpus_per_job=args.cpus_per_job,
        array_parallelism=getattr(args, "array_parallelism", None),
        max_requeues=args.slurm_max_requeues,
        sbatch_options=_sbatch_options(args.slurm_option),
        wait=not args.no_wait,
        resubmit=args.resubmit,
        nodes=counts["--nodes"],
        gpus_per_node=counts["--gpus-per-node"],
    )
