"""What runs inside a job: one point, or one training run's process. Kept light (submitit only), so a
job starts by importing no more than its point needs.

A job is a ``submitit.helpers.Checkpointable``: on preemption or when its time limit nears, Slurm
signals it, submitit calls its ``checkpoint()`` and requeues it (at most ``--slurm-max-requeues``
times), and the requeued job calls the same point again, which resumes from its own checkpoint in its
own folder as a rerun here would.

A job says how it ended in its JSON outcome file (``write_outcome``), at a path named by a random token
the submitting process chose: the submitting process reads that, never submitit's result pickle, so no
file in the folder is unpickled there (a pickle planted under the next job's ID would run its code).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

import submitit

FINISHED, FAILED = "finished", "failed"


def write_outcome(path: str, status: str, **fields: Any) -> None:
    """Writes the job's outcome (``{"status": FINISHED, "result": ...}`` or ``{"status": FAILED, "error":
    one line}``) atomically as JSON; returns None."""
    from ..base.artifacts import atomic_write_json

    atomic_write_json(path, {"status": status, **fields})


def run_and_record(fn: Callable[[], Any], outcome: str) -> Any:
    """Returns ``fn()``, first recording it as the job's outcome in ``outcome`` (a failure is recorded as
    its exception's one line, then raised again)."""
    try:
        result = fn()
    except Exception as e:
        write_outcome(outcome, FAILED, error=f"{type(e).__name__}: {' '.join(str(e).split())}")
        raise
    write_outcome(outcome, FINISHED, result=result)
    return result


@dataclasses.dataclass(frozen=True)
class LaunchPoint:
    """One independent point: its name (unique in the folder), ``fn(*args, **kwargs)`` computes it
    (picklable, resumable from ``directory``, where it checkpoints and marks itself finished)."""

    name: str
    fn: Callable[..., Any]
    args: tuple
    directory: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self) -> Any:
        """Computes the point: ``fn(*args, **kwargs)``."""
        return self.fn(*self.args, **self.kwargs)


class PointJob(submitit.helpers.Checkpointable):
    """A point's job, recording its outcome in ``outcome``; the inherited ``checkpoint()`` requeues the
    same call, so the point resumes."""

    def __init__(self, point: LaunchPoint, outcome: str) -> None:
        self.point, self.outcome = point, outcome

    def __call__(self) -> Any:
        from ..engine.fast import denormals  # torch, which every job's work needs anyway

        print(f"nfeval: point {self.point.name} in {self.point.directory}", flush=True)
        denormals.flush_in_this_process()  # a job's process is nfeval's
        return run_and_record(self.point, self.outcome)


class RunJob(submitit.helpers.Checkpointable):
    """A training run's job, one process per GPU: each joins torch.distributed from the job's
    environment, rank 0 records the exit status in ``outcome``; when requeued it runs with
    ``requeue_args`` (``--resume``)."""

    def __init__(self, fn: Callable[[argparse.Namespace], int], args, requeue_args, outcome: str) -> None:
        self.fn, self.args, self.requeue_args, self.outcome = fn, args, requeue_args, outcome

    def __call__(self) -> int:
        # RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT as torchrun sets them; every process
        # keeps seeing all its node's GPUs (parallel.resolve_device takes cuda:LOCAL_RANK)
        env = submitit.helpers.TorchDistributedEnvironment()
        env.export(set_cuda_visible_devices=False, overwrite=True)
        from ..engine.fast import denormals

        denormals.flush_in_this_process()  # a job's process is nfeval's
        if env.rank != 0:
            return self.fn(self.args)
        return run_and_record(lambda: self.fn(self.args), self.outcome)

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        requeued = RunJob(self.fn, self.requeue_args, self.requeue_args, self.outcome)
        return submitit.helpers.DelayedSubmission(requeued)
