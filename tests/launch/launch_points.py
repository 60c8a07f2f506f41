"""Points for the launcher tests, in a module of their own so a job imports nothing heavy to run one."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def counting_point(directory: str, steps: int, preempt_at: int | None) -> dict:
    """A resumable point: counts to ``steps`` (one line per step in progress.txt, kept across attempts)
    and resumes where it stopped; its first attempt is preempted at ``preempt_at`` the way Slurm does
    it (SIGUSR2 before the job is stopped)."""
    os.makedirs(directory, exist_ok=True)
    progress, flag = os.path.join(directory, "progress.txt"), os.path.join(directory, "preempted")
    with open(os.path.join(directory, "attempts.txt"), "a") as f:
        f.write(f"{os.getpid()}\n")
    start = len(open(progress).read().split()) if os.path.exists(progress) else 0
    for step in range(start, steps):
        if step == preempt_at and not os.path.exists(flag):
            open(flag, "w").close()
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(60)  # submitit's handler checkpoints, requeues and exits before this ends
        with open(progress, "a") as f:
            f.write(f"{step}\n")
    result = {"directory": directory, "steps": steps}
    Path(directory, "done.json").write_text(json.dumps(result))
    return result


def failing_point(directory: str) -> dict:
    """A point that fails: its job ends without a result."""
    raise ValueError(f"{directory}: this point cannot be computed")
