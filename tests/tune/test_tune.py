"""nfeval tune: best-LR selection, resuming a killed tune, --lr-from records and errors, a smoke tune."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
from conftest import make_text, tiny_train_config

from nfeval import cli
from nfeval.base.errors import ConfigError, DataError, MissingDataError
from nfeval.engine.training.train_config import TrainConfig
from nfeval.tune import results as tune_results
from nfeval.tune import sweep as tune


def point(preset: str, lr: float, seed: int, loss: float | None, status: str = "ok") -> dict:
    return {"preset": preset, "lr": lr, "seed": seed, "status": status, "val_loss": loss}


# ----------------------------------------------------------------------------------- selection


def test_best_lr_is_lowest_ppl_and_the_smaller_lr_on_ties():
    points = [point("a", 1e-3, 1, 3.0), point("a", 2e-3, 1, 2.5), point("a", 3e-3, 1, 2.5)]
    s = tune_results.summarize(points, ["a"], [3e-3, 1e-3, 2e-3], [1])["a"]
    assert s["best_lr"] == 2e-3 and s["best_val_ppl"] == pytest.approx(math.exp(2.5))
    assert list(s["per_lr"]) == ["0.001", "0.002", "0.003"]
    assert s["stability"]["ppl_spread"] == pytest.approx(math.exp(3.0) / math.exp(2.5))


def test_diverged_points_are_marked_and_never_best():
    points = [
        point("a", 1e-3, 1, 3.0),
        point("a", 1e-2, 1, None, "diverged"),
        point("a", 3e-2, 1, float("nan")),  # a non-finite final loss counts as diverged
        point("a", 1e-1, 1, 0.5),
        point("a", 1e-1, 2, None, "diverged"),  # one diverged seed makes the LR diverged
        point("a", 1e-3, 2, 3.2),
    ]
    s = tune_results.summarize(points, ["a"], [1e-3, 1e-2, 3e-2, 1e-1], [1, 2])["a"]
    assert s["best_lr"] == 1e-3
    assert s["best_val_ppl"] == pytest.approx(math.exp(3.1))  # PPL of the mean loss over seeds
    assert [row["status"] for row in s["per_lr"].values()] == ["ok", "diverged", "diverged", "diverged"]
    assert s["stability"] == {
        "lrs": 4,
        "diverged": 3,
        "incomplete": 0,
        "ppl_min": pytest.approx(math.exp(3.1)),
        "ppl_max": pytest.approx(math.exp(3.1)),
        "ppl_spread": pytest.approx(1.0),
    }


def test_missing_points_are_reported_and_an_incomplete_lr_is_not_best():
    points = [point("a", 1e-3, 1, 3.0), point("a", 1e-3, 2, 3.0), point("a", 1e-2, 1, 1.0)]
    summary = tune_results.summarize(points, ["a", "b"], [1e-3, 1e-2], [1, 2])
    a, b = summary["a"], summary["b"]
    assert a["best_lr"] == 1e-3  # 1e-2 is better on its one seed but its second seed is missing
    assert a["per_lr"]["0.01"]["status"] == "missing" and a["per_lr"]["0.01"]["seeds_missing"] == 1
    assert a["stability"]["incomplete"] == 1
    assert b["best_lr"] is None and b["stability"]["incomplete"] == 2
    warnings = tune_results.warnings_for(summary)
    assert any(w.startswith("b: no learning rate") for w in warnings)
    assert any("a: the best LR 0.001 is the smallest of the grid" in w for w in warnings)


def test_budget_spec_parsing():
    assert tune.parse_budget("steps=20") == ("max_steps", 20)
    assert tune.parse_budget("tokens=1e6") == ("max_tokens", 1_000_000)
    assert tune.parse_budget("seconds=2.5") == ("max_seconds", 2.5)
    for bad in ("20", "minutes=3", "steps=0", "steps=x", "flops=inf"):
        with pytest.raises(ConfigError, match="--budget"):
            tune.parse_budget(bad)


# ------------------------------------------------------------------------------- real short runs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    sentences = make_text(600)
    path.write_text("\n\n".join("\n".join(sentences[i : i + 6]) for i in range(0, 600, 6)) + "\n")
    return str(path)


def base_config(corpus: str, **changes) -> TrainConfig:
    return tiny_train_config(corpus, **{"max_steps": None, "log_interval": 0, **changes})


def test_a_killed_tune_resumes_without_redoing_finished_points(corpus, tmp_path, monkeypatch):
    calls = []
    real_train = tune.train

    def killed_at_second_point(cfg, out_dir, resume=False):
        if calls:
            raise KeyboardInterrupt  # the tune is killed while the second point trains
        calls.append(cfg.lr)
        return real_train(cfg, out_dir, resume)

    monkeypatch.setattr(tune, "train", killed_at_second_point)
    args = (base_config(corpus), ["prenorm-tiny"], [1e-3, 1e-2], "steps=4", str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        tune.tune(*args, progress=False)
    first = tmp_path / "points" / "prenorm-tiny" / "lr=0.001" / "seed=1" / tune.POINT
    assert first.is_file() and not (first.parent.parent.parent / "lr=0.01" / "seed=1" / tune.POINT).exists()
    written = first.stat().st_mtime_ns

    calls.clear()
    monkeypatch.setattr(
        tune,
        "train",
        lambda cfg, out_dir, resume=False: calls.append(cfg.lr) or real_train(cfg, out_dir, resume),
    )
    summary = tune.tune(*args, progress=False)
    assert calls == [1e-2]  # only the unfinished point ran
    assert first.stat().st_mtime_ns == written
    assert [p["status"] for p in summary["points"]] == ["ok", "ok"] and summary["missing"] == []
    assert summary["presets"]["prenorm-tiny"]["best_lr"] in (1e-3, 1e-2)

    calls.clear()
    tune.tune(*args, progress=False)
    assert calls == []  # everything finished: nothing runs
    with pytest.raises(ConfigError, match="different batch_size"):
        tune.tune(base_config(corpus, batch_size=3), *args[1:], progress=False)


def test_parallel_points_train_in_pool_workers_that_flush_denormals(corpus, tmp_path):
    import torch

    lrs = [1e-3, 2e-3, 4e-3]  # the caches built here first, then every point in two workers
    summary = tune.tune(
        base_config(corpus), ["prenorm-tiny"], lrs, "steps=2", str(tmp_path), jobs=2, progress=False
    )
    assert [p["status"] for p in summary["points"]] == ["ok"] * 3
    can_flush = torch.set_flush_denormal(False)  # x86 with DAZ: a worker's process flushes
    flushed = []
    for lr in lrs:
        run = os.path.join(tune.point_dir(str(tmp_path), tune.POINTS, "prenorm-tiny", lr, 1), "config.json")
        with open(run, encoding="utf-8") as f:
            flushed.append(json.load(f)["compute"]["hardware"]["cpu_flush_denormals"])
    assert flushed == [can_flush] * 3  # launch.local.init_worker, as every nfeval pool


def test_data_caches_are_built_once_per_corpus_before_the_workers(corpus, tmp_path, monkeypatch):
    from nfeval.tune import sweep

    built = []
    monkeypatch.setattr(sweep, "build_inputs", lambda cfg: built.append((cfg.train_data, cfg.lr)))
    other = str(tmp_path / "other.txt")
    with open(other, "w", encoding="utf-8") as f:
        f.write("another corpus\n")
    configs = [dataclasses.replace(base_config(corpus), lr=lr) for lr in (1e-3, 2e-3)]
    configs.append(dataclasses.replace(base_config(corpus), train_data=other, lr=4e-3))
    tune.build_data_caches(configs)
    assert built == [(corpus, 1e-3), (other, 4e-3)]


def test_smoke_tune_end_to_end_then_lr_from(corpus, tmp_path, capsys):
    out = tmp_path / "tune"
    argv = ["tune", "--preset", "normformer-tiny", "--lrs", "1e-3,3e-3", "--budget", "steps=6"]
    argv += ["--train-data", corpus, "--vocab-size", "300", "--batch-size", "2", "--seq-len", "32"]
    argv += ["--eval-samples", "8", "--peak-flops", "1e12", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "normformer-tiny" in printed and "best lr" in printed and "0/2" in printed
    summary = json.loads((out / "tune.json").read_text())
    assert (out / "tune.png").stat().st_size > 0
    assert summary["budget"] == {"spec": "steps=6", "field": "max_steps", "value": 6}
    assert summary["nfeval"]["provenance"]["nfeval_version"]
    points = summary["points"]
    assert [(p["lr"], p["step"], p["status"]) for p in points] == [(1e-3, 6, "ok"), (3e-3, 6, "ok")]
    assert len({p["data_fingerprint"] for p in points}) == 1
    best = min(points, key=lambda p: (p["val_ppl"], p["lr"]))
    assert summary["presets"]["normformer-tiny"]["best_lr"] == best["lr"]
    run_cfg = json.loads(
        (out / "points" / "normformer-tiny" / "lr=0.003" / "seed=1" / "config.json").read_text()
    )
    assert run_cfg["train"]["config"]["lr"] == 3e-3 and run_cfg["train"]["config"]["max_steps"] == 6

    lr, record = tune_results.tuned_lr(str(out / "tune.json"), "normformer-tiny")
    assert lr == best["lr"]
    assert record["points"] == 2 and record["budget"] == "steps=6" and record["grid"] == [1e-3, 3e-3]
    cfg = tune_results.with_tuned_lr(TrainConfig(preset="normformer-tiny"), str(out / "tune.json"))
    assert cfg.lr == lr and cfg.lr_from == record
    assert tune_results.describe_lr({"lr": cfg.lr, "lr_from": cfg.lr_from})["label"] == (
        f"lr {lr:g}, tuned (2 points, budget steps=6)"
    )
    assert tune_results.describe_lr({"lr": 6e-4})["label"] == "lr 0.0006, untuned"

    run = tmp_path / "run"  # nfeval train --lr-from takes the tuned LR and records where it came from
    argv = ["train", "--preset", "normformer-tiny", "--lr-from", str(out / "tune.json"), "--max-steps", "2"]
    argv += ["--train-data", corpus, "--vocab-size", "300", "--batch-size", "2", "--seq-len", "32"]
    argv += ["--eval-samples", "8", "--peak-flops", "1e12", "--no-progress", "--out", str(run)]
    assert cli.main(argv) == 0
    trained = json.loads((run / "config.json").read_text())["train"]["config"]
    assert trained["lr"] == lr and trained["lr_from"] == record
    assert cli.main(argv[:-1] + [str(tmp_path / "run2"), "--lr", "1e-3"]) == 2
    assert "--lr and --lr-from both given" in capsys.readouterr().err


def test_lr_from_errors(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(
        json.dumps({"budget": {"spec": "steps=6"}, "presets": {"prenorm-tiny": {"best_lr": 1e-3}}})
    )
    with pytest.raises(
        ConfigError, match=r"preset 'normformer-tiny' was not tuned there \(it has \['prenorm-tiny'\]\)"
    ):
        tune_results.tuned_lr(str(path), "normformer-tiny")
    with pytest.raises(ConfigError, match="--lr and --lr-from"):
        tune_results.with_tuned_lr(TrainConfig(preset="prenorm-tiny"), str(path), lr_given=True)
    with pytest.raises(MissingDataError, match="not found"):
        tune_results.tuned_lr(str(tmp_path / "nope.json"), "prenorm-tiny")
    path.write_text("{not json")
    with pytest.raises(DataError, match="invalid JSON"):
        tune_results.tuned_lr(str(path), "prenorm-tiny")
    path.write_text(json.dumps({"presets": {}}))
    with pytest.raises(DataError, match="budget.spec"):
        tune_results.tuned_lr(str(path), "prenorm-tiny")
    path.write_text(
        json.dumps({"budget": {"spec": "steps=6"}, "presets": {"prenorm-tiny": {"best_lr": None}}})
    )
    with pytest.raises(DataError, match="best_lr' is empty"):
        tune_results.tuned_lr(str(path), "prenorm-tiny")


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    base = ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3", "--out", str(tmp_path / "t")]
    assert cli.main([*base, "--budget", "steps=5", "--lr", "1e-3"]) == 2
    assert cli.main([*base, "--budget", "minutes=5"]) == 2
    assert cli.main([*base, "--budget", "steps=5", "--train-data", str(tmp_path / "missing.txt")]) == 2
    assert (
        cli.main(["tune", "--preset", "nope-tiny", "--lrs", "1e-3", "--budget", "steps=5", "--out", "x"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("nfeval tune: error: ") for line in err)
    assert "--lr: not a tune flag" in err[0] and "--budget 'minutes=5'" in err[1]
    assert "missing.txt: no such file" in err[2] and "unknown preset 'nope-tiny'" in err[3]
    assert not os.path.exists(tmp_path / "t")  # bad input fails before any work


def test_compare_shows_each_runs_lr_and_warns_when_only_one_side_is_tuned(tmp_path):
    from test_compare import make_run

    from nfeval.report.compare import compare
    from nfeval.report.compare_table import format_comparison

    record = {"file": "/x/tune.json", "points": 10, "budget": "steps=2000", "lr": 3e-3}
    base = make_run(tmp_path, "base", [(10, 100, 40.0), (20, 200, 30.0)])
    cand = make_run(tmp_path, "cand", [(10, 100, 30.0), (20, 200, 24.0)], arch="normformer")
    for run, train_config in ((base, {"lr": 6e-4}), (cand, {"lr": 3e-3, "lr_from": record})):
        path = os.path.join(run, "config.json")
        meta = json.loads(open(path).read())
        meta["train"] = {"config": train_config}
        open(path, "w").write(json.dumps(meta))
    result = compare([base, cand])
    assert [r["lr"]["tuned"] for r in result["runs"]] == [False, True]
    text = format_comparison(result)
    assert "base: lr 0.0006, untuned | cand: lr 0.003, tuned (10 points, budget steps=2000)" in text
    assert "warning: base: untuned learning rate beside tuned runs" in text


def test_leaderboard_sources_name_each_models_lr(tmp_path):
    from test_leaderboard import FULL, zeroshot_file

    from nfeval.report.leaderboard import build
    from nfeval.report.leaderboard_render import render_markdown

    record = {"points": 8, "budget": "steps=2000"}
    files = []
    for name, train_config in (("nf", {"lr": 3e-3, "lr_from": record}), ("pre", {"lr": 6e-4})):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"train": {"config": train_config}}))
        path = zeroshot_file(tmp_path / f"{name}.json", name * 8, name, 125_000_000, FULL)
        data = json.loads(open(path).read())
        data["nfeval"]["model"]["path"] = str(run)
        open(path, "w").write(json.dumps(data))
        files.append(path)
    board = build(files)
    assert [r["lr"]["tuned"] for r in board["zeroshot"]["rows"] if not r["reference"]] == [True, False]
    text = render_markdown(board)
    assert "- nf: fingerprint `nfnfnfnfnfnfnfnf`; lr 0.003, tuned (8 points, budget steps=2000); " in text
    assert "- pre: fingerprint `prepreprepreprep`; lr 0.0006, untuned; " in text
