"""Running named points (or one training run) as submitit jobs: submit what is neither finished nor
still queued, record the job IDs, then wait with a progress bar or return at once.

The jobs themselves are ``jobs.PointJob`` and ``jobs.RunJob``. Finished points are never passed in
(the caller checks their finished markers), and points whose recorded job is still queued or running
are not submitted again, so no point is computed twice. One process at a time submits from a folder
(the lock of its ``slurm/`` folder, ``sweep_lock.folder_lock``). How a job ended is read from its JSON
outcome file (``jobs.write_outcome``), never from submitit's result pickle. sbatch refusing a job (a
mistyped partition or account) is a ConfigError with sbatch's own message.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import submitit

from ..base.errors import ConfigError
from ..base.progress import progress_bar
from ..base.sweep_lock import folder_lock
from . import records
from .jobs import FINISHED, LaunchPoint, PointJob, RunJob
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
    jobs = [(p.name, lambda outcome, p=p: PointJob(p, outcome)) for p in points]
    return launch(jobs, folder, options, desc, point_parameters(options, f"nfeval-{desc}"), progress)


def run_training(fn, args, requeue_args, folder: str, options: LaunchOptions, progress: bool = True):
    """Runs ``fn(args)`` as one job of ``--nodes`` × ``--gpus-per-node`` processes; returns rank 0's
    exit status, or None with ``--no-wait`` (or when the job did not finish)."""
    params = run_parameters(options, f"nfeval-train-{os.path.basename(os.path.abspath(folder))}")
    job = ("run", lambda outcome: RunJob(fn, args, requeue_args, outcome))
    done = launch([job], folder, options, "train", params, progress)
    return done[0] if done else None


def launch(jobs, folder: str, options: LaunchOptions, desc: str, params: dict, progress: bool) -> list | None:
    """Submits ``jobs`` ([(name, make(outcome path) -> callable)]) except those whose recorded job is still
    queued or running (or of unknown state, unless ``--resubmit``); waits for all of them unless
    ``--no-wait``. Holds the lock of ``folder``'s job files throughout: another process submitting from
    the same folder is refused."""
    with folder_lock(records.job_files(folder)):
        tasks = params["ntasks_per_node"] * params["nodes"]
        record = records.read(folder)["jobs"]
        submit, waiting = [], {}
        for name, make in jobs:
            entry = record.get(name)
            verdict, word = records.state(entry, folder) if entry else (records.ENDED, "")
            if verdict == records.ENDED or (verdict == records.UNKNOWN and options.resubmit):
                submit.append((name, make))
            elif verdict == records.ACTIVE:
                print(f"nfeval {desc}: {name}: job {entry['job_id']} is {word}, not resubmitted", flush=True)
                waiting[name] = _waiting(entry, folder, tasks)
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


def _waiting(entry: dict[str, Any], folder: str, tasks: int) -> tuple[submitit.Job, str, str | None]:
    """Returns (submitit's handle, executor, outcome path or None) of a recorded job to wait for."""
    outcome = records.outcome_path(folder, entry["outcome"]) if "outcome" in entry else None
    return records.job(entry["executor"], folder, entry["job_id"], tasks), entry["executor"], outcome


def _submit(jobs, folder: str, options: LaunchOptions, desc: str, params: dict) -> dict[str, tuple]:
    executor = make_executor(options, folder, params)
    tokens = [records.new_outcome_token() for _ in jobs]
    calls = [make(records.outcome_path(folder, t)) for (_, make), t in zip(jobs, tokens)]
    quiet = io.StringIO()  # submitit prints sbatch's stderr itself: it is in our one line instead
    try:
        with contextlib.redirect_stderr(quiet):
            submitted = executor.submit_array(calls)
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as e:
        message = " ".join(str(e).split()) or "no message"
        raise ConfigError(f"sbatch refused the {desc} job(s): {message}") from None
    entries = {
        name: {"job_id": job.job_id, "executor": options.executor, "log": str(job.paths.stdout), "outcome": t}
        for (name, _), job, t in zip(jobs, submitted, tokens)
    }
    path = records.add(folder, entries)
    print(
        f"nfeval {desc}: submitted {len(jobs)} job(s) (record {path}; logs {records.job_files(folder)})",
        flush=True,
    )
    if not options.wait:
        for name, entry in entries.items():
            print(f"  {entry['job_id']}  {name}")
    tasks = params["ntasks_per_node"] * params["nodes"]
    return {name: _waiting(entry, folder, tasks) for name, entry in entries.items()}


def wait(jobs: dict[str, tuple], desc: str, poll_s: float, progress: bool = True) -> list:
    """Waits for ``jobs`` (name -> ``_waiting``'s tuple) with a progress bar; returns the results the
    finished ones recorded in their outcome files (rank 0's for a job of several processes) and prints one
    line per job that failed or ended without an outcome, with its log."""
    results, pending, seen_ended = [], dict(jobs), set()
    bar = progress_bar(total=len(jobs), enabled=progress and bool(jobs), desc=f"{desc} jobs", unit="job")
    while pending:
        for name, (handle, executor, path) in list(pending.items()):
            gone = records.ended(handle, executor)  # asked first: a job writes its outcome before it ends
            outcome = records.read_outcome(path) if path else None
            if outcome is None and not (gone and name in seen_ended):
                if gone:  # a shared filesystem may show the outcome a poll later
                    seen_ended.add(name)
                continue
            del pending[name]
            bar.update(1)
            if outcome is not None and outcome["status"] == FINISHED:
                results.append(outcome.get("result"))
                continue
            why = f"failed: {outcome.get('error')}" if outcome else "ended without finishing"
            line = f"nfeval {desc}: {name}: job {handle.job_id} {why}; log {handle.paths.stderr}"
            bar.write(line, file=sys.stderr)
        if pending:
            time.sleep(poll_s)
    bar.close()
    return results
