"""GLUE sweeps read against yardsticks: diverged points marked and never best, learning-rate typos refused
before any work, the majority class beside every sweep, and --limit for quick tries."""

from __future__ import annotations

import json

import pytest
from test_glue import glue_dir  # noqa: F401  (the fixture: learnable SST-2 and STS-B files)

from nfeval import cli
from nfeval.glue import finetune, submission, summary
from nfeval.glue import metrics as glue_metrics
from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig


def point(lr: float, accuracy: float, diverged: bool = False) -> dict:
    return {"lr": lr, "seed": 0, "metrics": {"accuracy": accuracy}, "diverged": diverged}


MAJORITY = {"prediction": 1, "metrics": {"accuracy": 0.55}, "score": 0.55, "rows": {"dev": 200}}


def test_a_diverged_point_is_marked_and_never_best():
    entry = summary.summarize_task("sst2", [point(1e-3, 0.8), point(3e5, 0.9, diverged=True)], MAJORITY)
    assert entry["best_lr"] == 1e-3 and entry["per_lr"]["300000.0"]["diverged"] == 1
    assert "diverged" not in entry["per_lr"]["0.001"] and entry["beats_majority"] is True
    table = summary.format_table({"tasks": {"sst2": entry}, "glue_average": entry["score"]})
    assert "div." in table.splitlines()[2] and "div.: a point's training loss became non-finite" in table

    gone = summary.summarize_task("sst2", [point(3e5, 0.9, diverged=True)], MAJORITY)
    assert gone["best_lr"] is None and gone["score"] is None and gone["best"] == {}
    assert summary.glue_average({"sst2": gone, "rte": entry}) is None  # not a mean over fewer tasks
    table = summary.format_table({"tasks": {"sst2": gone}, "glue_average": None})
    assert (
        "sst2: every learning rate diverged; no score" in table and "GLUE average over 1 task(s): –" in table
    )
    with pytest.raises(ValueError, match="sst2: every learning rate diverged, so no model predicts"):
        submission.best_point("out", {"tasks": {"sst2": gone}}, "sst2")


def test_the_table_says_when_the_best_point_does_not_beat_the_majority_class():
    entry = summary.summarize_task("sst2", [point(1e-3, 0.5)], MAJORITY)
    assert entry["beats_majority"] is False and entry["majority"] == MAJORITY
    table = summary.format_table({"tasks": {"sst2": entry}, "glue_average": 0.5})
    assert table.splitlines()[0].split()[-1] == "majority" and table.splitlines()[2].endswith("0.5500")
    assert "sst2: the best point (accuracy 0.5000) does not beat the majority class (0.5500)" in table


def test_majority_class_scores_with_the_tasks_metrics():
    cola = glue_metrics.majority("cola", [1, 1, 0], {"dev": [1, 0, 1, 1]})
    assert cola["prediction"] == 1 and cola["metrics"] == {"mcc": 0.0} and cola["rows"] == {"dev": 4}
    mrpc = glue_metrics.majority("mrpc", [1, 1, 0], {"dev": [1, 0, 1, 1]})
    assert mrpc["metrics"] == pytest.approx({"accuracy": 0.75, "f1": 6 / 7})
    stsb = glue_metrics.majority("stsb", [1.0, 3.0], {"dev": [0.5, 4.0]})
    assert stsb["prediction"] == 2.0 and stsb["score"] == 0.0
    mnli = glue_metrics.majority("mnli", [2, 0, 2], {"dev_matched": [2, 1], "dev_mismatched": [0, 0]})
    assert mnli["metrics"] == {"accuracy_m": 0.5, "accuracy_mm": 0.0} and mnli["score"] == 0.25


def test_a_non_finite_loss_ends_the_point_as_diverged(tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch):  # noqa: F811
    real = finetune._train_epoch

    def nan_at_the_larger_lr(model, opt, *args):
        loss = real(model, opt, *args)
        return loss * float("nan") if opt.param_groups[0]["initial_lr"] == 3e-3 else loss

    monkeypatch.setattr(finetune, "_train_epoch", nan_at_the_larger_lr)
    recipe = glue.Recipe(epochs=3, batch_size=32)
    cfg = GlueConfig(
        tasks=["sst2"],
        lrs=[1e-3, 3e-3],
        out_dir=str(tmp_path),
        glue_dir=glue_dir,
        recipe=recipe,
        progress=False,
    )
    out = glue.sweep(tiny_mlm_ckpt, cfg)
    result = json.loads((tmp_path / "glue/sst2/lr=0.003/seed=0/result.json").read_text())
    assert result["diverged"] and [h["train_loss"] for h in result["history"]] == [None]  # stopped at once
    assert not (tmp_path / "glue/sst2/lr=0.003/seed=0/state.pt").exists()
    task = out["tasks"]["sst2"]
    assert task["best_lr"] == 1e-3 and task["per_lr"]["0.003"]["diverged"] == 1
    assert json.loads((tmp_path / "glue/sst2/lr=0.001/seed=0/result.json").read_text())["diverged"] is False


def test_a_learning_rate_typo_is_refused_before_any_work(tmp_path, capsys):
    argv = ["glue", "--ckpt", str(tmp_path / "no-such-run"), "--tasks", "rte", "--sweep", "--out"]
    assert cli.main([*argv, str(tmp_path / "out"), "--lrs", "1e-5,3e5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nfeval glue: error: --lrs: learning rate 300000 ")
    assert "did you mean 3e-05?" in err and not (tmp_path / "out").exists()
    assert cli.main([*argv, str(tmp_path / "out"), "--lrs", "1e-9"]) == 2
    assert "expected 1e-07 to 0.03" in capsys.readouterr().err
    with pytest.raises(Exception, match="learning rate 1 is more than"):
        glue.check_lr(1.0)
    glue.check_lr(3e-3)  # a small CPU model's learning rate is within the range


def test_limit_cuts_train_and_dev_rows_and_is_recorded(tiny_mlm_ckpt, glue_dir, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", glue_dir, "--tasks", "sst2", "--sweep"]
    argv += ["--lrs", "1e-3,3e-3", "--epochs", "1", "--limit", "40", "--jobs", "2", "--out", str(out)]
    assert cli.main([*argv, "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "sst2: --limit 40: the first 40 train rows and dev rows only" in text and "majority" in text
    result = json.loads((out / "glue/sst2/lr=0.001/seed=0/result.json").read_text())
    assert result["train"]["examples"] == 40 and result["key"]["data"]["limit"] == 40
    predictions = json.loads((out / "glue/sst2/lr=0.001/seed=0/predictions.json").read_text())
    assert len(predictions["splits"]["dev"]["labels"]) == 40
    summary_json = json.loads((out / "glue.json").read_text())
    assert summary_json["nfeval"]["data"]["sst2"]["limit"] == 40
    majority = summary_json["tasks"]["sst2"]["majority"]
    assert majority["rows"] == {"dev": 40} and majority["metrics"]["accuracy"] == 0.5
    assert isinstance(summary_json["tasks"]["sst2"]["beats_majority"], bool)


def test_limit_is_a_count_or_0_for_all(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["glue", "--ckpt", "x", "--limit", "-1"])
    assert "argument --limit: expected a count, or 0 for all, got '-1'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--limit 0"):  # the library's spelling of all is None
        glue.sweep("x", GlueConfig(tasks=["sst2"], lrs=[1e-3], limit=0))
