"""Tuning that does not share noise with judging (issue 49): the tune's band of LRs it cannot tell from
its best, the verdict re-read across it, and tune seeds disjoint from the judged ones."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from nfeval.base.errors import ConfigError
from nfeval.pipelines import lr_band
from nfeval.report import verdict
from nfeval.tune import results as tune_results


def _points(losses: dict[float, list[float]], seeds=(101, 102, 103)) -> list[dict]:
    return [
        {"preset": "a", "lr": lr, "seed": s, "status": "ok", "val_loss": loss, "vocab_size": 300}
        for lr, row in losses.items()
        for s, loss in zip(seeds, row)
    ]


def test_the_band_holds_the_lrs_whose_paired_interval_reaches_the_best():
    losses = {
        1e-3: [3.30, 3.31, 3.29],  # clearly worse on every seed: out
        3e-3: [3.10, 3.14, 3.08],  # the best mean
        6e-3: [3.12, 3.13, 3.11],  # differences +0.02, -0.01, +0.03: the interval reaches 0
        1e-2: [3.15, 3.19, 3.13],  # +0.05 on every seed: no spread, out
    }
    s = tune_results.summarize(_points(losses), ["a"], list(losses), [101, 102, 103])["a"]
    assert s["best_lr"] == 3e-3
    assert s["lr_band"] == [3e-3, 6e-3]
    # the rule by hand for 6e-3: mean 0.0133, half-width t(0.975, 2) * sd / sqrt(3)
    d = [0.02, -0.01, 0.03]
    half = stats.t(2).ppf(0.975) * statistics.stdev(d) / math.sqrt(3)
    assert statistics.fmean(d) - half <= 0
    table = {"presets": {"a": s}, "budget": {"spec": "steps=4"}, "grid": {"seeds": [101, 102, 103]}}
    assert "a: within the tune's noise of the best: 0.003, 0.006" in tune_results.format_table(
        table | {"missing": [], "warnings": []}
    )
    assert tune_results.grid_cells(s).split("; ")[1:3] == [
        f"0.003: {math.exp(statistics.fmean(losses[3e-3])):.2f}*",
        f"0.006: {math.exp(statistics.fmean(losses[6e-3])):.2f}≈",
    ]


def test_one_seed_gives_no_noise_estimate_and_a_band_of_the_best_alone():
    s = tune_results.summarize(_points({1e-3: [3.2], 3e-3: [3.1]}, seeds=(101,)), ["a"], [1e-3, 3e-3], [101])
    assert s["a"]["lr_band"] == [3e-3]


def test_a_verdict_that_changes_inside_the_band_is_lr_sensitive():
    diffs = {
        (1e-2, 2e-2): [-0.2, -0.22, -0.18, -0.21, -0.19],  # the best pair: candidate worse
        (1e-2, 6e-3): [0.01, -0.02, 0.03, 0.0, -0.01],  # the candidate at another LR of its band: a tie
    }
    record = lr_band.sensitivity((1e-2, 2e-2), ([], [6e-3]), lambda a, b: diffs[a, b], margin=0.02)
    assert [r["verdict"] for r in record["rows"]] == [verdict.DISAGREES, verdict.INCONCLUSIVE]
    assert record["sensitive"]
    claim = {**verdict.decide(diffs[1e-2, 2e-2]), "family": verdict.PRIMARY, "lr_sensitivity": record}
    (adjusted,) = verdict.adjust([claim])
    assert adjusted["verdict"] == verdict.LR_SENSITIVE
    line = lr_band.describe(record, ("Pre-LN", "NormFormer"))
    assert "**LR-sensitive**" in line and "NormFormer 0.006: inconclusive" in line


def test_a_verdict_that_holds_across_the_band_keeps_its_holm_verdict():
    same = [-0.2, -0.22, -0.18, -0.21, -0.19]
    record = lr_band.sensitivity((1e-2, 2e-2), ([6e-3], [4e-2]), lambda a, b: same)
    assert len(record["rows"]) == 3 and not record["sensitive"]
    (adjusted,) = verdict.adjust(
        [{**verdict.decide(same), "family": verdict.PRIMARY, "lr_sensitivity": record}]
    )
    assert adjusted["verdict"] == verdict.DISAGREES
    assert "the same verdict at every LR" in lr_band.describe(record, ("a", "b"))


def test_a_pair_not_trained_yet_is_left_out():
    record = lr_band.sensitivity((1.0, 2.0), ([0.5], []), lambda a, b: [] if a == 0.5 else [0.1, 0.2])
    assert [(r["base_lr"], r["cand_lr"]) for r in record["rows"]] == [(1.0, 2.0)]
    assert lr_band.describe(record) is None  # nothing to compare it with


def test_tune_seeds_are_disjoint_from_the_judged_seeds():
    assert lr_band.tune_seed_values(3) == [101, 102, 103]
    lr_band.check_seeds(100, 3)
    with pytest.raises(ConfigError, match="--seeds 101"):
        lr_band.check_seeds(101, 3)
    with pytest.raises(ConfigError, match="--tune-seeds 0"):
        lr_band.check_seeds(5, 0)
