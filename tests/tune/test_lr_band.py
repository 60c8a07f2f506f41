"""Tuning that does not share noise with judging: the band (the best LR and its stable, trained ×√2
neighbours, fixed before the runs), the points added to tune it, the verdict re-read across it, and tune
seeds disjoint from the judged ones."""

from __future__ import annotations

import math
import statistics

import pytest

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


def test_the_band_is_the_best_and_its_root_two_neighbours_whatever_the_noise():
    losses = {
        1.06e-3: [3.30, 3.31, 3.29],  # the best's lower neighbour (1.5e-3 ÷ √2): in, though clearly worse
        1.5e-3: [3.10, 3.14, 3.08],  # the best mean
        2.12e-3: [3.12, 3.13, 3.11],  # its upper neighbour (1.5e-3 × √2): in
        6e-3: [3.11, 3.12, 3.10],  # within the old band's noise of the best, but no neighbour: out
    }
    s = tune_results.summarize(_points(losses), ["a"], list(losses), [101, 102, 103])["a"]
    assert s["best_lr"] == 1.5e-3
    assert s["lr_band"] == [1.06e-3, 1.5e-3, 2.12e-3]
    assert s["band_untuned"] == [] and s["band_unstable"] == []
    assert tune_results.neighbours(1.5e-3) == (1.06e-3, 2.12e-3)
    table = {"presets": {"a": s}, "budget": {"spec": "steps=4"}, "grid": {"seeds": [101, 102, 103]}}
    assert "a: the band (the best and its stable ×√2 neighbours): 0.00106, 0.0015, 0.00212" in (
        tune_results.format_table(table | {"missing": [], "warnings": []})
    )
    cells = tune_results.grid_cells(s).split("; ")
    assert cells[1] == f"0.0015: {math.exp(statistics.fmean(losses[1.5e-3])):.2f}*"
    assert cells[2].endswith("≈") and not cells[3].endswith("≈")


def test_a_neighbour_the_grid_lacks_is_untuned_and_one_that_diverged_is_unstable():
    points = _points({3e-3: [3.1, 3.1, 3.1], 4.24e-3: [3.2, 3.2, 3.2], 6e-3: [3.3, 3.3, 3.3]})
    points[3]["status"] = "diverged"  # 4.24e-3 on seed 101
    s = tune_results.summarize(points, ["a"], [3e-3, 6e-3], [101, 102, 103], {"a": [4.24e-3]})["a"]
    assert s["best_lr"] == 3e-3 and s["lr_band"] == [3e-3]
    assert s["band_unstable"] == [4.24e-3] and s["band_untuned"] == [2.12e-3]
    assert "0.00424: diverged†" in tune_results.grid_cells(s)
    assert lr_band.failed_neighbours(s) == {
        2.12e-3: "not tuned",
        4.24e-3: "diverged on a tune seed: unstable",
    }


def test_a_neighbour_counts_only_where_every_tune_seed_trained():
    unigram = 600.0  # the gate's threshold: 400, log 5.99
    losses = {2.12e-3: [5.0, 6.2, 5.0], 3e-3: [4.0, 4.1, 4.0], 4.24e-3: [4.5, 4.6, 4.4]}
    s = tune_results.summarize(_points(losses), ["a"], list(losses), [101, 102, 103])["a"]
    assert s["lr_band"] == [2.12e-3, 3e-3, 4.24e-3]  # every seed finished
    assert lr_band.entry_band(s, unigram) == [4.24e-3]  # 2.12e-3's seed 102 ended above the gate
    assert lr_band.entry_band(s) == [2.12e-3, 4.24e-3]
    assert lr_band.failed_neighbours(s, unigram) == {2.12e-3: "a tune seed did not train: unstable"}


def test_tune_band_adds_the_neighbours_and_follows_a_best_that_moved():
    """The grid's best is 3e-3; its upper neighbour 4.24e-3 turns out better, so its own neighbours are
    tuned too; then every best has its neighbours and the loop stops."""
    truth = {1e-3: 3.5, 2.12e-3: 3.2, 3e-3: 3.1, 4.24e-3: 3.0, 6e-3: 3.05, 1e-2: 3.4}
    calls = []

    def tune(extra):
        calls.append({p: list(v) for p, v in extra.items()})
        lrs = [1e-3, 3e-3, 1e-2, *extra.get("a", ())]
        points = _points({lr: [truth[lr]] * 3 for lr in lrs})
        return {"presets": tune_results.summarize(points, ["a"], lrs, [101, 102, 103]), "missing": []}

    summary = lr_band.tune_band(tune)
    assert calls == [{}, {"a": [2.12e-3, 4.24e-3]}, {"a": [2.12e-3, 4.24e-3, 6e-3]}]
    entry = summary["presets"]["a"]
    assert entry["best_lr"] == 4.24e-3 and entry["lr_band"] == [3e-3, 4.24e-3, 6e-3]


def test_tune_band_adds_nothing_where_the_best_did_not_train_or_points_are_missing():
    def tune(extra, missing=()):
        points = _points({1e-3: [6.7] * 3, 3e-3: [6.6] * 3})
        return {
            "presets": tune_results.summarize(points, ["a"], [1e-3, 3e-3], [101]),
            "missing": list(missing),
        }

    calls = []
    lr_band.tune_band(lambda extra: calls.append(extra) or tune(extra), unigram=700.0)  # exp(6.6) = 735
    assert calls == [{}]
    calls.clear()
    lr_band.tune_band(lambda extra: calls.append(extra) or tune(extra, missing=[{"preset": "a"}]))
    assert calls == [{}]


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
