"""A write the filesystem refuses (a full disk, a file size limit) is one line naming the file and exit
status 2 from every writer, torch's and safetensors' included, and the rerun completes the work.

The refusal is real: the command runs in a process whose files may not grow beyond a limit
(``RLIMIT_FSIZE``, with SIGXFSZ ignored, so a write past it fails with EFBIG as a full disk's with
ENOSPC)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import tiny_train_args

ROOT = str(Path(__file__).resolve().parents[2])
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
if sys.argv[2] == "nfeval":
    from nfeval.cli import console
    sys.argv = ["nfeval", *sys.argv[3:]]
    sys.exit(console())
import torch
from nfeval.glue import finetune
finetune._save_state(sys.argv[3], {"model": torch.zeros(1 << 18)})
"""
WEIGHTS_FIT = 700_000  # a tiny run's weights (0.5 MB) fit, its checkpoint's optimizer state (1 MB) not
NOTHING_BIG_FITS = 100_000


def limited(limit: int, *argv: str) -> subprocess.CompletedProcess:
    """Runs ``LIMITED`` with files limited to ``limit`` bytes; returns the finished process."""
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", LIMITED, str(limit), *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_a_checkpoint_the_disk_refuses_is_one_line_and_the_rerun_completes(tmp_path, small_corpus):
    flags = tiny_train_args(small_corpus, max_steps=3, ckpt_interval=1)
    assert limited(1 << 40, "nfeval", "train", "--out", str(tmp_path / "warm"), *flags).returncode == 0
    run = tmp_path / "run"
    refused = limited(WEIGHTS_FIT, "nfeval", "train", "--out", str(run), *flags)  # torch.save's state
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr[-3000:]
    assert "training_state.pt: cannot write (File too large)" in refused.stderr
    weights = limited(NOTHING_BIG_FITS, "nfeval", "train", "--out", str(tmp_path / "w"), *flags)
    assert weights.returncode == 2 and weights.stderr.count("\n") == 1, weights.stderr[-3000:]
    assert "model.safetensors: cannot write (File too large)" in weights.stderr  # safetensors' own error
    again = limited(1 << 40, "nfeval", "train", "--out", str(run), "--resume", *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run / "complete.json").is_file() and not list(run.rglob(".tmp*"))


def test_a_glue_point_state_the_disk_refuses_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "point" / "state.pt"
    path.parent.mkdir()
    refused = limited(NOTHING_BIG_FITS, "glue", str(path))
    assert refused.returncode == 1 and "Traceback" in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"nfeval.base.errors.OutputError: {path}: cannot write (File too large)"
    )
    assert os.listdir(path.parent) == []  # nothing half-written left
