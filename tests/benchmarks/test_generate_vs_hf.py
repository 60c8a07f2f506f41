"""benchmarks/generate_vs_hf.py runs at a tiny shape with HF's static-cache side, and its table shows
that side's speed and agreement; a ratio's spread is the range of the rounds' paired ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from generate_vs_hf import interleaved, ratio_spread, spread  # noqa: E402


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


def test_a_ratios_spread_pairs_each_round_and_holds_the_ratio_of_the_medians():
    slow, fast = [2.0, 3.0, 8.0], [1.0, 1.0, 2.0]
    assert ratio_spread(slow, fast) == (2.0, 4.0)  # pairs 2, 3 and 4, not max / min of the sides (8)
    low, high = ratio_spread(slow, fast)
    assert low <= 3.0 / 1.0 <= high  # the ratio of the medians lies within it
    assert spread((0.9712, 1.0849)) == "0.97-1.08"
    with pytest.raises(ValueError):
        ratio_spread([1.0, 2.0], [1.0])  # every round has both sides


def test_interleaved_keeps_every_rounds_time_and_the_last_result():
    calls = []
    timed = interleaved({"a": lambda: calls.append("a") or len(calls), "b": lambda: calls.append("b")}, 3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # a warm-up each, then alternating order
    assert len(timed["a"].rounds) == len(timed["b"].rounds) == 3
    assert timed["a"].seconds == sorted(timed["a"].rounds)[1] and timed["a"].result == 7
