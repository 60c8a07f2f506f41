"""benchmarks/rerun_tolerance.py's comparison, on made-up runs (the script itself trains a 12 × 128 model
four times in separate processes, which no test does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import rerun_tolerance  # noqa: E402


def run(kernel: str, fingerprint: str, val_loss: float) -> dict:
    return {"kernel": kernel, "fingerprint": fingerprint, "final_train_loss": 6.0, "final_val_loss": val_loss}


def test_repeats_and_kernel_gap():
    runs = [run("torch", "a", 5.8), run("torch", "a", 5.8), run("onednn", "b", 6.0), run("onednn", "c", 6.0)]
    result = rerun_tolerance.compare(runs)
    assert result["bit_identical_repeats"] == {"torch": True, "onednn": False}  # other weights
    assert result["abs_delta_log_ppl"] == {"torch/onednn": pytest.approx(0.2)}
    assert rerun_tolerance.compare(runs[:1]) == {"bit_identical_repeats": {}, "abs_delta_log_ppl": {}}
