"""benchmarks/generate_vs_hf.py runs at a tiny shape with HF's static-cache side, and its table shows
that side's speed and agreement."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_in_process_benchmark_adds_the_static_cache_side(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "generate_vs_hf.py")
    argv = [sys.executable, script, "--layers", "1", "--d-model", "32", "--batches", "2",
            "--new-tokens", "3", "--rounds", "1", "--no-bf16", "--hf-static"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    row = next(line for line in lines if line.startswith("| 2 | 3 |"))
    assert "nfeval / HF static" in header and header.count("|") == row.count("|")
    assert row.rstrip().endswith("| 2/2 |"), row  # greedy fp32: HF's static cache gives nfeval's tokens
