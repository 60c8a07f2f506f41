"""benchmarks/gpu_budget_axis.py starts and lands: its --dry-run runs the GPU call's path on the CPU (the
smoke scale, two tiny budgets) and brings back one archive a commit can be made from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_budget_axis_dry_run_lands_one_archive(tmp_path):
    out, dest = tmp_path / "axis", tmp_path / "dest"
    dest.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(REPO / "benchmarks" / "gpu_budget_axis.py"), "--dry-run", "--out", str(out)]
    done = subprocess.run([*argv, "--dest", str(dest)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((dest / "call.json").read_text())
    assert record["jobs"] == 1 and record["device"] == "cpu" and not record["stopped_at_deadline"]
    assert [b["folder"] for b in record["budgets"]] == ["tokens=64", "tokens=128"]
    assert all(b["report"] and b["runs"] == 4 and b["tune_points"] > 0 for b in record["budgets"])
    with tarfile.open(dest / "budget_gpu.tar") as tar:
        names = tar.getnames()
    assert "axis/report.md" in names and "axis/tokens=128/records.tar.xz" in names
    assert not [n for n in names if n.endswith((".safetensors", ".jsonl")) or "/runs/" in n]
