"""The record of a folder's submitted jobs (``<folder>/slurm_jobs.json``) and what a recorded job is doing.

The record maps each point's name to the job that last ran it, so a rerun of the same command knows
which unfinished points are still queued or running (left alone) and which ended without finishing
(submitted again). A job's state comes from its JSON outcome file (``jobs.write_outcome``, written when
the job ends, at a path named by a random token the record keeps) or else from the scheduler: ``sacct``
for Slurm; for submitit's local executor, whether the process is alive. submitit's own result pickles
are never read.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from typing import Any

import submitit

from ..base.artifacts import atomic_write_json
from ..base.errors import DataError
from ..base.jsonio import load_json
from .jobs import FAILED, FINISHED

RECORD = "slurm_jobs.json"
JOB_FILES = "slurm"  # <folder>/slurm/: submitit's job pickles, sbatch scripts and logs
ACTIVE, ENDED, UNKNOWN = "active", "ended", "unknown"
EXECUTORS = ("slurm", "local")  # submitit's: Slurm, or its local executor (how the tests drive this path)
# sacct states of a job that is queued, running or about to run again
SLURM_ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING"}
SLURM_ACTIVE |= {"COMPLETING", "RESIZING", "SUSPENDED", "PREEMPTED", "SIGNALING", "STAGE_OUT", "READY"}


def job_files(folder: str) -> str:
    """Returns the folder of submitit's files for the jobs of ``folder``."""
    return os.path.join(os.path.abspath(folder), JOB_FILES)


def new_outcome_token() -> str:
    """Returns a fresh random token naming one submitted job's outcome file."""
    return secrets.token_hex(16)


def outcome_path(folder: str, token: str) -> str:
    """Returns the path of the outcome file named by ``token`` among ``folder``'s job files."""
    if not re.fullmatch(r"[0-9a-f]{32}", token):
        raise DataError(f"{os.path.join(folder, RECORD)}: outcome token {token!r} is not one nfeval wrote")
    return os.path.join(job_files(folder), f"outcome-{token}.json")


def read_outcome(path: str) -> dict[str, Any] | None:
    """Returns a job's outcome (``{"status": ..., "result" or "error": ...}``), None while there is none
    (or it is not one a job wrote)."""
    try:
        with open(path, encoding="utf-8") as f:
            outcome = json.load(f)
    except (OSError, ValueError):
        return None
    return outcome if isinstance(outcome, dict) and outcome.get("status") in (FINISHED, FAILED) else None


def read(folder: str) -> dict[str, Any]:
    """Returns ``folder``'s job record, ``{"jobs": {point name: {job_id, executor, ...}}}`` (empty when
    nothing was submitted from it)."""
    path = os.path.join(folder, RECORD)
    if not os.path.isfile(path):
        return {"jobs": {}}
    hint = "delete it to forget the submitted jobs (then check squeue yourself)"
    record = load_json(path, hint=hint)
    jobs = record.setdefault("jobs", {})
    if not isinstance(jobs, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("job_id"), str) and e.get("executor") in EXECUTORS
        for e in jobs.values()
    ):
        raise DataError(f"{path}: key 'jobs': expected {{name: {{job_id, executor, ...}}}}; {hint}")
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
    if "outcome" in entry and read_outcome(outcome_path(folder, entry["outcome"])) is not None:
        return ENDED, "finished"
    if entry["executor"] != "slurm":
        return _local_state(entry["job_id"])
    if shutil.which("sacct") is None:
        return UNKNOWN, "sacct is not on PATH"
    handle = job(entry["executor"], folder, entry["job_id"])
    word = (handle.get_info(mode="force").get("State") or "UNKNOWN").split()[0].upper()
    if word == "UNKNOWN":
        return UNKNOWN, "sacct does not know the job"
    return (ACTIVE if word in SLURM_ACTIVE else ENDED), word


def ended(handle: submitit.Job, executor: str) -> bool:
    """Returns whether a job the submitting process waits on has ended (its scheduler says so; Slurm's
    answer is cached by submitit's watcher between its polls)."""
    if executor != "slurm":
        return _local_state(handle.job_id)[0] == ENDED
    return handle.watcher.is_done(handle.job_id, mode="standard")


def _local_state(job_id: str) -> tuple[str, str]:
    """A local job is its controller process: active while that process lives (a zombie has ended)."""
    if not job_id.isdigit() or int(job_id) < 2:  # 0 would signal our own process group
        return UNKNOWN, f"{job_id!r} is not a job's process ID"
    pid = int(job_id)
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
