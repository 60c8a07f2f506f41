"""benchmarks/gpu_check.py starts: its --dry-run runs every GPU path on the CPU with tiny shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = record["checks"]
    assert list(checks) == [
        "train_step_eager",
        "train_step_compiled",
        "flash_attention",
        "ddp_checkpoint_resume",
        "zeroshot_cuda_vs_cpu",
    ]
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert (
        checks["train_step_eager"]["tokens_per_s"] > 0 and checks["ddp_checkpoint_resume"]["losses_bitwise"]
    )
    zeroshot = checks["zeroshot_cuda_vs_cpu"]  # CPU against CPU in the dry run: identical
    assert zeroshot["max_abs_loglik_diff"] == 0.0 and zeroshot["choices_differing"] == 0
    table = (tmp_path / "gpu_check.md").read_text()
    assert table.startswith("## GPU check") and table.count("| ok |") == 5
