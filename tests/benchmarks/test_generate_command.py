"""benchmarks/generate_command_vs_hf.py runs end to end at a tiny shape: the exported model loads in
Hugging Face's Auto classes, both commands give the same completions, and the table's row has a cell
for each of its header's columns, each ratio's spread among them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from generate_vs_hf import SHARED  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (SHARED / "tokenizer" / "gpt2").is_dir(), reason="needs ../shared/data/tokenizer/gpt2 (real data)"
)


def test_whole_command_benchmark_runs_and_agrees(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(REPO / "benchmarks" / "generate_command_vs_hf.py"), "--layers", "1",
            "--d-model", "64", "--settings", "2x2", "--new-tokens", "4", "--rounds", "1"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    row = next(line for line in lines if line.startswith("| 2 | 2 |"))
    assert row.rstrip().endswith("| 2/2 |"), row
    assert header.count("|") == row.count("|"), (header, row)
    cells = [c.strip() for c in row.strip("|").split("|")]
    wall_ratio, wall_spread = cells[4].strip("*x"), cells[5]
    assert wall_spread == f"{wall_ratio}-{wall_ratio}", row  # one round: its ratio is the median's
