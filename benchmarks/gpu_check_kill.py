"""``gpu_check.py``'s checks of ``nfeval train`` as a process of its own on the device:

- ``killed_run_resumes``: killed with SIGKILL once its first checkpoint is on disk, then resumed by the
  same command with ``--resume``; its losses and final weights must equal, bit for bit, those of the same
  run left uninterrupted.
- ``out_of_memory_exits``: a batch far over the device's memory (the 125M shape, 1,024 × 2,048 tokens:
  about 0.6 TB of bf16 activations with flash attention, against 80-141 GB) must end in exit status 2 and
  one line naming the batch and the largest batch that fits, no traceback, and a run folder holding
  nothing. In the dry run the CPU's memory is simulated as the engine's tests do it: the model's forward
  raises ``torch.OutOfMemoryError`` on more than 2 sequences.
"""

from __future__ import annotations

import os
import re
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
    return nfeval_train(out, tiny_run_flags(s, corpus), "--no-progress", "--set", "dropout=0.1")


def nfeval_train(out: Path, flags: dict, *extra: str) -> list[str]:
    """Returns the command line of ``nfeval train --out out`` with ``flags`` ({name: value}) and ``extra``."""
    argv = [x for k, v in flags.items() for x in (f"--{k}", str(v))]
    return [sys.executable, "-m", "nfeval", "train", "--out", str(out), *argv, *extra]


def tiny_run_flags(s: Setup, corpus: str) -> dict:
    """Returns the flags of the killed check's tiny run: 40 steps, a checkpoint every 4."""
    return {
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


OOM_FITS = 2  # the dry run's simulated memory: the model's forward fails on more sequences
SIMULATED_MEMORY = f"""
import sys, torch
from nfeval import cli
from nfeval.engine.model.model import Transformer
real = Transformer.encode
def encode(self, idx, *args, **kwargs):
    if idx.shape[0] > {OOM_FITS}:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated on the CPU)")
    return real(self, idx, *args, **kwargs)
Transformer.encode = encode
sys.exit(cli.main(sys.argv[1:]))
"""


def oom_command(s: Setup, corpus: str, out: Path) -> tuple[list[str], int, int]:
    """Returns (the ``nfeval train`` command of a batch that cannot fit, its batch, its sequence length):
    the 125M Pre-LN shape at 1,024 × 2,048 tokens on the device; a tiny one under simulated memory in
    the dry run."""
    batch, seq = (8, 32) if s.dry_run else (1024, 2048)
    flags = {"preset": "prenorm-tiny" if s.dry_run else "prenorm-125M", "train-data": corpus,
             "vocab-size": 512, "batch-size": batch, "seq-len": seq, "max-steps": 2, "ckpt-interval": 1,
             "log-interval": 1, "eval-interval": 0, "eval-samples": 8, "peak-flops": 1e12,
             "device": str(s.device), "dtype": "fp32" if s.dry_run else "bf16"}  # fmt: skip
    command = nfeval_train(out, flags, "--no-progress")
    if s.dry_run:  # ``python -c SIMULATED_MEMORY train …`` instead of ``python -m nfeval train …``
        command[1:3] = ["-c", SIMULATED_MEMORY]
    return command, batch, seq


def out_of_memory_exits(s: Setup) -> dict:
    """Runs ``nfeval train`` with a batch the device cannot hold; returns its exit status, its stderr line,
    the batch it names and the largest batch that fits, and what its run folder holds (raises when it
    did not exit 2 with one such line and an empty folder)."""
    corpus = write_corpus(s.work / "oom-corpus.txt")
    run = s.work / "oom-run"
    command, batch, seq = oom_command(s, corpus, run)
    t0 = time.perf_counter()
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=600)
    lines = done.stderr.strip().splitlines()
    left = sorted(p.name for p in run.iterdir()) if run.is_dir() else []
    fits = re.search(r"the largest that fits is (\d+) ×", done.stderr)
    said = f"a batch of {batch} × {seq} tokens" in done.stderr and fits is not None
    one_line = len(lines) == 1 and "Traceback" not in done.stderr
    if done.returncode != 2 or not (one_line and said) or set(left) > {".lock"}:
        raise RuntimeError(
            f"exit {done.returncode}, {len(lines)} stderr line(s), run folder {left}: {done.stderr[-1500:]}"
        )
    return {
        "simulated": s.dry_run,
        "batch": batch,
        "seq_len": seq,
        "exit_status": done.returncode,
        "line": lines[0],
        "largest_batch_that_fits": int(fits.group(1)),
        "run_folder_holds": left,
        "seconds_to_exit": time.perf_counter() - t0,
    }
