"""benchmarks/zeroshot_vs_hf.py compares the two sides' metrics under the key both results files use
(the lm-eval task that ran, ``piqa_local``), and a difference in one metric is reported."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from zeroshot_vs_hf import summary  # noqa: E402


def results(acc: float) -> dict:
    """Returns a results file's content as either side writes it: keyed by the task that ran."""
    return {"results": {"piqa_local": {"acc,none": acc, "acc_norm,none": 0.5}}, "nfeval": {"scoring": {}}}


def rounds(nfeval_acc: float) -> list:
    row = {"round": 1, "wall_s": {"hf": 10.0, "nfeval": 2.0}, "ratio": 5.0, "load_avg_1m": [0.1, 0.1]}
    return [(row, {"hf": (None, results(0.25)), "nfeval": (None, results(nfeval_acc))})]


ARGS = argparse.Namespace(limit=5, tasks=["piqa"], batch_size=16, d_model=64, layers=2)


def test_equal_metrics_under_the_task_that_ran_are_identical():
    result = summary(ARGS, rounds(0.25))
    assert result["metrics_identical"] is True
    assert result["accuracy"]["piqa_local"]["acc,none"] == {"hf": 0.25, "nfeval": 0.25}
    assert result["median_ratio"] == 5.0


def test_a_differing_metric_is_reported():
    assert summary(ARGS, rounds(0.3))["metrics_identical"] is False
