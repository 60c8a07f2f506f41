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
        "killed_run_resumes",
        "zeroshot_cuda_vs_cpu",
        "generate_vs_hf",
        "zeroshot_vs_hflm",
        "glue_vs_trainer",
    ]
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert (
        checks["train_step_eager"]["tokens_per_s"] > 0 and checks["ddp_checkpoint_resume"]["losses_bitwise"]
    )
    killed = checks["killed_run_resumes"]
    assert (
        killed["losses_bitwise"] and killed["weights_bitwise"] and 0 < killed["killed_after_checkpoint"] < 40
    )
    zeroshot = checks["zeroshot_cuda_vs_cpu"]  # CPU against CPU in the dry run: identical
    assert zeroshot["max_abs_loglik_diff"] == 0.0 and zeroshot["choices_differing"] == 0
    generation = checks["generate_vs_hf"]  # greedy fp32 on one device: the same tokens on every side
    for batch in (1, 16):
        prompts = generation[f"b{batch}_prompts"]
        assert generation[f"b{batch}_identical"] == generation[f"b{batch}_hf_static_identical"] == prompts
        assert generation[f"b{batch}_nfeval_tok_s"] > 0 and generation[f"b{batch}_limit_fp32"] > 0
    scoring = checks["zeroshot_vs_hflm"]
    assert scoring["forward_by"] == "nfeval engine (GPT-2 weights)" and scoring["max_abs_loglik_diff"] < 1e-4
    glue = checks["glue_vs_trainer"]
    sides = ["nfeval", "HF Trainer", "HF Trainer (random order)"]
    assert all(glue[f"{side} s"] > 0 and 0 <= glue[f"{side} best dev"] <= 1 for side in sides)
    assert glue["HF Trainer / nfeval"] > 0
    table = (tmp_path / "gpu_check.md").read_text()
    assert table.startswith("## GPU check") and table.count("| ok |") == len(checks)


def test_gpu_check_refuses_an_unknown_check_and_a_check_without_its_input(tmp_path):
    script = str(REPO / "benchmarks" / "gpu_check.py")
    for checks, message in [("nope", "unknown check 'nope'"), ("zeroshot_cuda_vs_cpu", "add it")]:
        done = subprocess.run(
            [sys.executable, script, "--dry-run", "--checks", checks, "--out", str(tmp_path)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]


def test_killed_run_resumes_bit_for_bit_in_the_dry_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "gpu_check.py")
    done = subprocess.run(
        [sys.executable, script, "--dry-run", "--checks", "killed_run_resumes", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    killed = json.loads((tmp_path / "gpu_check.json").read_text())["checks"]["killed_run_resumes"]
    assert killed["status"] == "ok" and killed["losses_bitwise"] and killed["weights_bitwise"]
    assert 0 < killed["killed_after_checkpoint"] < killed["steps"]  # killed mid-run, after a checkpoint
