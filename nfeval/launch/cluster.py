"""Running named points (or one training run) as submitit jobs: submit what is neither finished nor
still queued, record the job IDs, then wait with a progress bar or return at once.

The jobs themselves are ``jobs.PointJob`` and ``jobs.RunJob``. Finished points are never passed in
(the caller checks their finished markers), and points whose recorded job is still queued or running
are not submitted again, so no point is computed twice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import submitit

from ..base.progress import progress_bar
from . import records
from .jobs import LaunchPoint, PointJob, RunJob
from .options import LaunchOptions


def point_parameters(options: LaunchOptions, name: str) -> dict[str, Any]:
    """Returns the SlurmExecutor parameters of a point's job in an array named ``name``."""
    return _slurm_parameters(options, name, nodes=1, tasks=1, gpus=options.gpus_per_job)


def run_parameters(options: LaunchOptions, name: str) -> dict[str, Any]:
    """Returns the SlurmExecutor parameters of a training run: nodes × GPUs, one process per GPU."""
    gpus = options.gpus_per_node
    return _slurm_parameters(options, name, nodes=options.nodes, tasks=gpus, gpus=gpus)


def _slurm_parameters(options: LaunchOptions, name: str, nodes: int, tasks: int, gpus: int) -> dict:
    params: dict[str, Any] = {
        "job_name": name,
        "partition": options.partition,
        "time": options.time_min,
        "nodes": nodes,
        "ntasks_per_node": tasks,
        "gpus_per_node": gpus,
        "cpus_per_task": options.cpus_per_job,
        "array_parallelism": options.array_parallelism,
        # requeueable, so submitit's `scontrol requeue` works on every cluster's defaults
        "additional_parameters": {"requeue": True, **options.sbatch_options},
    }
    return {k: v for k, v in params.items() if v is not None}


def make_executor(options: LaunchOptions, folder: str, params: dict[str, Any]) -> submitit.Executor:
    """Returns submitit's executor for ``options`` writing its files under ``folder/slurm/``."""
    files = records.job_files(folder)
    if options.executor == "slurm":
        executor = submitit.SlurmExecutor(files, max_num_timeout=options.max_requeues)
        executor.update_parameters(**params)
        return executor
    executor = submitit.LocalExecutor(files, max_num_timeout=options.max_requeues)
    executor.update_parameters(
        timeout_min=params["time"], tasks_per_node=params["ntasks_per_node"], gpus_per_node=0
    )
    return executor


def run_points(
    points: Sequence[LaunchPoint], folder: str, options: LaunchOptions, desc: str, progress: bool = True
) -> list | None:
    """Runs the (unfinished) ``points`` as one job array named ``nfeval-<desc>``; returns the results of
    the jobs that finished, in completion order, or None with ``--no-wait``."""
    jobs = [(p.name, PointJob(p)) for p in points]
    return launch(jobs, folder, options, desc, point_parameters(options, f"nfeval-{desc}"), progress)


def run_training(fn, args, requeue_args, folder: str, options: LaunchOptions, progress: bool = True):
    """Runs ``fn(args)`` as one job of ``--nodes`` × ``--gpus-per-node`` processes; returns rank 0's
    exit status, or None with ``--no-wait`` (or when the job did not finish)."""
    params = run_parameters(options, f"nfeval-train-{os.path.basename(os.path.abspath(folder))}")
    done = launch([("run", RunJob(fn, args, requeue_args))], folder, options, "train", params, progress)
    return done[0] if done else None


def launch(jobs, folder: str, options: LaunchOptions, desc: str, params: dict, progress: bool) -> list | None:
    """Submits ``jobs`` ([(name, callable)]) except those whose recorded job is still queued or running
    (or of unknown state, unless ``--resubmit``); waits for all of them unless ``--no-wait``."""
    tasks = params["ntasks_per_node"] * params["nodes"]
    record = records.read(folder)["jobs"]
    submit, waiting = [], {}
    for name, fn in jobs:
        entry = record.get(name)
        verdict, word = records.state(entry, folder) if entry else (records.ENDED, "")
        if verdict == records.ENDED or (verdict == records.UNKNOWN and options.resubmit):
            submit.append((name, fn))
        elif verdict == records.ACTIVE:
            print(f"nfeval {desc}: {name}: job {entry['job_id']} is {word}, not resubmitted", flush=True)
            waiting[name] = records.job(entry["executor"], folder, entry["job_id"], tasks)
        else:
            print(
                f"nfeval {desc}: {name}: the state of job {entry['job_id']} cannot be known ({word}); "
                "not resubmitted (check squeue, then rerun with --resubmit to submit it again)",
                flush=True,
            )
    if submit:
        waiting.update(_submit(submit, folder, options, desc, params))
    if not options.wait:
        return None
    return wait(waiting, desc, options.poll_s, progress)


def _submit(jobs, folder: str, options: LaunchOptions, desc: str, params: dict) -> dict[str, submitit.Job]:
    executor = make_executor(options, folder, params)
    submitted = executor.submit_array([fn for _, fn in jobs])
    entries = {
        name: {"job_id": job.job_id, "executor": options.executor, "log": str(job.paths.stdout)}
        for (name, _), job in zip(jobs, submitted)
    }
    path = records.add(folder, entries)
    print(
        f"nfeval {desc}: submitted {len(jobs)} job(s) (record {path}; logs {records.job_files(folder)})",
        flush=True,
    )
    if not options.wait:
        for name, entry in entries.items():
            print(f"  {entry['job_id']}  {name}")
    return {name: job for (name, _), job in zip(jobs, submitted)}


def wait(jobs: dict[str, submitit.Job], desc: str, poll_s: float, progress: bool = True) -> list:
    """Waits for ``jobs`` (name -> job) with a progress bar; returns the results of those that finished
    (rank 0's for a job of several processes) and prints one line per failed job with its log."""
    names = {id(job): name for name, job in jobs.items()}
    results = []
    bar = progress_bar(total=len(jobs), enabled=progress and bool(jobs), desc=f"{desc} jobs", unit="job")
    for job in submitit.helpers.as_completed(list(jobs.values()), poll_frequency=poll_s):
        try:
            results.append(job.results()[0])
        except submitit.core.utils.UncompletedJobError as e:
            line = f"nfeval {desc}: {names[id(job)]}: job {job.job_id} {_why(e)}; log {job.paths.stderr}"
            bar.write(line, file=sys.stderr)
        bar.update(1)
    bar.close()
    return results


def _why(error: Exception) -> str:
    """Returns one line on why a job did not finish: the last line of its traceback."""
    text = str(error)
    parts = text.split("----------------------\n")
    lines = [line for line in (parts[1] if len(parts) > 2 else text).splitlines() if line.strip()]
    return "failed: " + (lines[-1].strip() if lines else type(error).__name__)
