"""The launcher flags every command with independent points shares, and their checked values."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil

from ..base.config_flags import add_config_flags, config_from_args, flag_field, flag_fields
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


@dataclasses.dataclass(frozen=True)
class LauncherFlags:
    """The launcher flags as given (``base.config_flags`` derives them): ``launch_options`` checks them into
    a LaunchOptions. ``gpus_per_job`` and ``array_parallelism`` are flags of a command of independent
    ``POINTS``; ``nodes`` and ``gpus_per_node`` of one training ``RUN``."""

    launcher: str = flag_field(
        "local",
        "local (default): this machine; slurm: submit the work as Slurm jobs (submitit)",
        metavar="{local,slurm}",
    )
    slurm_partition: str | None = flag_field(
        None, "Slurm partition to submit to (needed with --launcher slurm)"
    )
    slurm_time: str = flag_field(
        "4:00:00",
        "time limit per job: minutes or [D-]HH:MM[:SS] (default 4:00:00); a job that reaches it is requeued "
        "and resumes from its checkpoint",
    )
    gpus_per_job: int = flag_field(1, "GPUs per point's job (default 1)")
    array_parallelism: int | None = flag_field(None, "most jobs of the array running at once (default: all)")
    nodes: int = flag_field(1, "nodes of the Slurm job (default 1)")
    gpus_per_node: int = flag_field(1, "GPUs per node, one process each (default 1)")
    cpus_per_job: int | None = flag_field(None, "CPU cores per job (per process for a run)")
    slurm_max_requeues: int = flag_field(3, "times a preempted or timed-out job is requeued (default 3)")
    slurm_option: list[str] = flag_field(
        help="any other sbatch option, e.g. account=myproj or qos=high (repeatable)",
        factory=list,
        action="append",
        metavar="KEY=VALUE",
    )
    no_wait: bool = flag_field(
        False, "submit, print the job IDs and return; rerun to collect", action="store_true"
    )
    resubmit: bool = flag_field(
        False, "resubmit unfinished points whose recorded job's state cannot be known", action="store_true"
    )


PER_KIND = {POINTS: ("gpus_per_job", "array_parallelism"), RUN: ("nodes", "gpus_per_node")}


def add_launcher_arguments(p: argparse.ArgumentParser, kind: str = POINTS) -> None:
    """Adds LauncherFlags' flags in a "launcher" group: ``--launcher`` and the Slurm flags, per job for a
    command of independent ``POINTS`` (``--gpus-per-job``, ``--array-parallelism``), per node for one
    training ``RUN`` (``--nodes``, ``--gpus-per-node``)."""
    other = PER_KIND[RUN if kind == POINTS else POINTS]
    names = [name for name in flag_fields(LauncherFlags) if name not in other]
    add_config_flags(p.add_argument_group("launcher"), LauncherFlags, names=names)


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
    flags = config_from_args(args, LauncherFlags)
    launcher = str(flags.launcher).strip().lower()
    if launcher not in LAUNCHERS:
        raise ConfigError(f"--launcher {flags.launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    counts = {
        "--gpus-per-job": flags.gpus_per_job,
        "--nodes": flags.nodes,
        "--gpus-per-node": flags.gpus_per_node,
        "--cpus-per-job": flags.cpus_per_job,
        "--array-parallelism": flags.array_parallelism,
    }
    bad = [f"{flag} {n}" for flag, n in counts.items() if n is not None and n < 1]
    if flags.slurm_max_requeues < 0:
        bad.append(f"--slurm-max-requeues {flags.slurm_max_requeues}")
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
        if not flags.slurm_partition:
            raise ConfigError("--launcher slurm: needs --slurm-partition NAME, the partition to submit to")
    return LaunchOptions(
        launcher=launcher,
        partition=flags.slurm_partition,
        time_min=parse_minutes(flags.slurm_time),
        gpus_per_job=counts["--gpus-per-job"],
        cpus_per_job=flags.cpus_per_job,
        array_parallelism=flags.array_parallelism,
        max_requeues=flags.slurm_max_requeues,
        sbatch_options=_sbatch_options(flags.slurm_option),
        wait=not flags.no_wait,
        resubmit=flags.resubmit,
        nodes=counts["--nodes"],
        gpus_per_node=counts["--gpus-per-node"],
    )
