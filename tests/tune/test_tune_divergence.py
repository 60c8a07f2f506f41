"""A diverging learning rate never breaks a tune (issue 22 item 1): an ``ok`` point whose final loss is
far above a uniform guess is diverged, never best, and the summary (and --report-only) still works."""

from __future__ import annotations

import json
import math

from test_tune import corpus, point  # noqa: F401  (corpus is a fixture)

from nfeval import cli
from nfeval.tune import results as tune_results
from nfeval.tune import sweep as tune


def test_a_huge_finite_loss_is_diverged_and_never_best():
    points = [point("a", 1e-3, 1, 3.0), {**point("a", 50.0, 1, 6273.0), "vocab_size": 300}]
    points.append({**point("a", 1e-2, 1, math.log(300) + 2), "vocab_size": 300})  # worse than uniform
    s = tune_results.summarize(points, ["a"], [1e-3, 1e-2, 50.0], [1])["a"]
    assert s["best_lr"] == 1e-3
    assert [row["status"] for row in s["per_lr"].values()] == ["ok", "diverged", "diverged"]
    assert s["stability"]["diverged"] == 2
    marked = tune_results.mark_diverged(points)
    assert [p["status"] for p in marked] == ["ok", "diverged", "diverged"]
    assert "above the divergence threshold" in marked[1]["message"] and marked[1]["val_ppl"] is None
    # without a recorded vocabulary the threshold is where exp() would overflow
    assert tune_results.point_status(point("a", 1.0, 1, 6273.0))[0] == "diverged"
    assert tune_results.divergence_threshold(None) == tune_results.MAX_LOSS


def test_report_only_on_a_sweep_with_an_overflowing_point(corpus, tmp_path, capsys):  # noqa: F811
    argv = ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3,50", "--budget", "steps=2"]
    argv += ["--train-data", corpus, "--vocab-size", "300", "--batch-size", "2", "--seq-len", "32"]
    argv += ["--eval-samples", "8", "--peak-flops", "1e12", "--no-progress", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    bad = tmp_path / "points" / "prenorm-tiny" / "lr=50.0" / "seed=1" / tune.POINT
    data = json.loads(bad.read_text())
    data.update(status="ok", val_loss=6273.0, val_ppl=1e300, message=None)  # as an old tune wrote it
    data.pop("vocab_size", None)
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli.main([*argv, "--report-only"]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "tune.json").read_text())
    preset = summary["presets"]["prenorm-tiny"]
    assert preset["best_lr"] == 1e-3 and preset["per_lr"]["50.0"]["status"] == "diverged"
    assert [p["status"] for p in summary["points"]] == ["ok", "diverged"]
    assert "diverged" in capsys.readouterr().out
