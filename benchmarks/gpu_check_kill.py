"""``gpu_check.py``'s ``killed_run_resumes``: ``nfeval train`` as a process of its own on the device, killed
with SIGKILL once its first checkpoint is on disk, then resumed by the same command with ``--resume``;
its losses and final weights must equal, bit for bit, those of the same run left uninterrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from gpu_check_engine import Setup, write_corpus
from safetensors.torch import load_file

from nfeval.engine.checkpoints import rundir

STEPS = 40  # enough after the first checkpoint (step 4) that the kill lands mid-run
REPO = Path(__file__).resolve().parents[1]


def train_command(s: Setup, corpus: str, out: Path) -> list[str]:
    """Returns the ``nfeval train`` command line of the check's tiny run into ``out``."""
    flags = {
        "preset": "normformer-tiny",
        "train-data": corpus,
        "vocab-size": 512,
        "batch-size": 4,
        "seq-len": 64,
        "max-steps": STEPS,
        "ckpt-interval": 4,
        "log-interval": 1,
        "eval-interval": 0,
        "eval-samples": 8,
        "peak-flops": 1e12,
        "lr": 3e-3,
        "device": str(s.device),
        "dtype": "fp32" if s.dry_run else "bf16",
    }
    argv = [x for k, v in flags.items() for x in (f"--{k}", str(v))]
    return [
        sys.executable,
        "-m",
        "nfeval",
        "train",
        "--out",
        str(out),
        *argv,
        "--no-progress",
        "--set",
        "dropout=0.1",
    ]


def environment() -> dict[str, str]:
    """Returns the children's environment: this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def train_to_end(command: list[str]) -> float:
    """Runs ``command`` to its end; returns its seconds. Raises RuntimeError with its stderr on failure."""
    t0 = time.perf_counter()
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:5])} exited {done.returncode}: {done.stderr[-1500:]}")
    return time.perf_counter() - t0


def kill_after_first_checkpoint(command: list[str], run: Path) -> int:
    """Starts ``command``, SIGKILLs it as soon as a checkpoint folder appears in ``run``; returns the
    checkpoint's step. Raises RuntimeError when the run ended before it could be killed."""
    proc = subprocess.Popen(command, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while not rundir.checkpoint_dirs(str(run)) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = rundir.checkpoint_dirs(str(run))
    if proc.returncode != -signal.SIGKILL or not saved or (run / rundir.COMPLETE).exists():
        stderr = proc.stderr.read().decode()[-1500:]
        raise RuntimeError(
            f"the run was not killed mid-run (exit {proc.returncode}, checkpoints {saved}): {stderr}"
        )
    proc.stderr.close()
    return int(Path(saved[0]).name.removeprefix("step_"))


def killed_run_resumes(s: Setup) -> dict:
    """Trains the tiny run uninterrupted, and again killed after its first checkpoint and resumed;
    returns whether their losses and final weights are bitwise equal (raises when they are not)."""
    corpus = write_corpus(s.work / "kill-corpus.txt")
    full, killed = s.work / "kill-full", s.work / "kill-resumed"
    full_s = train_to_end(train_command(s, corpus, full))
    killed_at = kill_after_first_checkpoint(train_command(s, corpus, killed), killed)
    resume_s = train_to_end([*train_command(s, corpus, killed), "--resume"])
    a, b = (rundir.read_metrics(str(d), "train") for d in (full, killed))
    losses_bitwise = [r["loss"] for r in a] == [r["loss"] for r in b]
    wa, wb = (load_file(str(d / rundir.WEIGHTS)) for d in (full, killed))
    weights_bitwise = wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    steps = [r["step"] for r in b]
    if steps != list(range(1, STEPS + 1)) or not (losses_bitwise and weights_bitwise):
        diff = max((abs(x["loss"] - y["loss"]) for x, y in zip(a, b)), default=float("nan"))
        raise RuntimeError(
            f"the resumed run differs from the uninterrupted one: logged steps {steps[:3]}…{steps[-3:]}, "
            f"losses bitwise {losses_bitwise} (max difference {diff}), weights bitwise {weights_bitwise}"
        )
    return {
        "steps": STEPS,
        "killed_after_checkpoint": killed_at,
        "losses_bitwise": losses_bitwise,
        "weights_bitwise": weights_bitwise,
        "uninterrupted_s": full_s,
        "resume_s": resume_s,
    }
