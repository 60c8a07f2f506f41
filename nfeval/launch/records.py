"""The record of a folder's submitted jobs (``<folder>/slurm_jobs.json``) and what a recorded job is doing.

The record maps each point's name to the job that last ran it, so a rerun of the same command knows
which unfinished points are still queued or running (left alone) and which ended without finishing
(submitted again). A job's state comes from its result file (written when the job ends) or else from
the scheduler: ``sacct`` for Slurm; for submitit's local executor, whether the process is alive.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import submitit

from ..base.artifacts import atomic_write_json
from ..base.jsonio import load_json

RECORD = "slurm_jobs.json"
JOB_FILES = "slurm"  # <folder>/slurm/: submitit's job pickles, sbatch scripts and logs
ACTIVE, ENDED, UNKNOWN = "active", "ended", "unknown"
# sacct states of a job that is queued, running or about to run again
SLURM_ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING"}
SLURM_ACTIVE |= {"COMPLETING", "RESIZING", "SUSPENDED", "PREEMPTED", "SIGNALING", "STAGE_OUT", "READY"}


def job_files(folder: str) -> str:
    """Returns the folder of submitit's files for the jobs of ``folder``."""
    return os.path.join(os.path.abspath(folder), JOB_FILES)


def read(folder: str) -> dict[str, Any]:
    """Returns ``folder``'s job record, ``{"jobs": {point name: {job_id, executor, ...}}}`` (empty when
    nothing was submitted from it)."""
    path = os.path.join(folder, RECORD)
    if not os.path.isfile(path):
        return {"jobs": {}}
    record = load_json(path, hint="delete it to forget the submitted jobs (then check squeue yourself)")
    record.setdefault("jobs", {})
    return record


def add(folder: str, entries: dict[str, dict[str, Any]]) -> str:
    """Adds ``entries`` (point name -> job) to ``folder``'s record, replacing older jobs of the same
    points; returns the record's path."""
    record = read(folder)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    record["jobs"].update({name: {**entry, "submitted": stamp} for name, entry in entries.items()})
    path = os.path.join(folder, RECORD)
    atomic_write_json(path, record)
    return path


def job(executor: str, folder: str, job_id: str, tasks: int = 1) -> submitit.Job:
    """Returns submitit's handle on a recorded job (results, logs, state)."""
    cls = submitit.SlurmJob if executor == "slurm" else submitit.LocalJob
    return cls(folder=job_files(folder), job_id=job_id, tasks=list(range(tasks)))


def state(entry: dict[str, Any], folder: str) -> tuple[str, str]:
    """Returns (ACTIVE | ENDED | UNKNOWN, the scheduler's word for it) for a recorded job."""
    handle = job(entry["executor"], folder, entry["job_id"])
    if handle.paths.result_pickle.exists():
        return ENDED, "finished"
    if entry["executor"] != "slurm":
        return _local_state(int(entry["job_id"]))
    if shutil.which("sacct") is None:
        return UNKNOWN, "sacct is not on PATH"
    word = (handle.get_info(mode="force").get("State") or "UNKNOWN").split()[0].upper()
    if word == "UNKNOWN":
        return UNKNOWN, "sacct does not know the job"
    return (ACTIVE if word in SLURM_ACTIVE else ENDED), word


def _local_state(pid: int) -> tuple[str, str]:
    """A local job is its controller process: active while that process lives (a zombie has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ENDED, "process gone"
    except PermissionError:
        return UNKNOWN, "process of another user"
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        zombie = False
    return (ENDED, "process gone") if zombie else (ACTIVE, "RUNNING")
