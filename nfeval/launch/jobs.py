"""What runs inside a job: one point, or one training run's process. Kept light (submitit only), so a
job starts by importing no more than its point needs.

A job is a ``submitit.helpers.Checkpointable``: on preemption or when its time limit nears, Slurm
signals it, submitit calls its ``checkpoint()`` and requeues it (at most ``--slurm-max-requeues``
times), and the requeued job calls the same point again, which resumes from its own checkpoint in its
own folder as a rerun here would.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

import submitit


def flush_denormals() -> None:
    """Flushes denormals in this job's process, which nfeval owns (``engine.denormals``; imports torch,
    which every job's work needs anyway); returns None."""
    from ..engine.denormals import flush_in_this_process

    flush_in_this_process()


@dataclasses.dataclass(frozen=True)
class LaunchPoint:
    """One independent point: its name (unique in the folder), ``fn(*args)`` computes it (picklable,
    resumable from ``directory``, where it checkpoints and marks itself finished)."""

    name: str
    fn: Callable[..., Any]
    args: tuple
    directory: str


class PointJob(submitit.helpers.Checkpointable):
    """A point's job; the inherited ``checkpoint()`` requeues the same call, so the point resumes."""

    def __init__(self, point: LaunchPoint) -> None:
        self.point = point

    def __call__(self) -> Any:
        print(f"nfeval: point {self.point.name} in {self.point.directory}", flush=True)
        flush_denormals()
        return self.point.fn(*self.point.args)


class RunJob(submitit.helpers.Checkpointable):
    """A training run's job, one process per GPU: each joins torch.distributed from the job's
    environment; when requeued it runs with ``requeue_args`` (``--resume``)."""

    def __init__(self, fn: Callable[[argparse.Namespace], int], args, requeue_args) -> None:
        self.fn, self.args, self.requeue_args = fn, args, requeue_args

    def __call__(self) -> int:
        # RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT as torchrun sets them; every process
        # keeps seeing all its node's GPUs (parallel.resolve_device takes cuda:LOCAL_RANK)
        env = submitit.helpers.TorchDistributedEnvironment()
        env.export(set_cuda_visible_devices=False, overwrite=True)
        flush_denormals()
        return self.fn(self.args)

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        return submitit.helpers.DelayedSubmission(RunJob(self.fn, self.requeue_args, self.requeue_args))
