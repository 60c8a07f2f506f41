"""An ``nfeval reproduce --out`` folder moved elsewhere resumes there: its LR tune (whose tokenizer lies
inside the folder), step ratios and finished runs are reused, and a run killed before the move resumes."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

from nfeval.pipelines import runs
from nfeval.pipelines.reproduce import ReproduceConfig, analysis_experiment, run_reproduce, run_specs
from nfeval.tune import sweep as tune_sweep


def counting(real, calls):
    def count(cfg, out_dir, resume=False):
        calls.append(out_dir)
        return real(cfg, out_dir, resume=resume)

    return count


def test_a_moved_reproduce_folder_reuses_its_tune_and_resumes_a_killed_run(tmp_path, monkeypatch):
    first = ReproduceConfig(
        out=str(tmp_path / "a"), scale="smoke", seeds=1, only=("fig2-clm",), device="cpu", progress=False
    )
    run_reproduce(first)
    shutil.move(first.out, tmp_path / "b")
    out = str(tmp_path / "b")
    victim = os.path.join(out, "runs", "clm-normformer", "seed1")  # killed during its final save
    for name in ("complete.json", "model.safetensors"):
        os.remove(os.path.join(victim, name))
    os.remove(victim + ".json")
    os.remove(os.path.join(out, "experiments", "fig2-clm", "section.json"))  # so is the section it feeds
    trained, tune_runs = [], []
    monkeypatch.setattr(runs, "train", counting(runs.train, trained))
    monkeypatch.setattr(tune_sweep, "train", counting(tune_sweep.train, tune_runs))
    monkeypatch.setattr(runs, "measure_step_ratio", None)  # the stored ratios are reused

    result = run_reproduce(ReproduceConfig(**{**vars(first), "out": out}))

    assert tune_runs == [] and trained == [victim]
    assert os.path.isfile(os.path.join(victim, "model.safetensors")) and result["report"].startswith(out)
    train_cfg = json.load(open(os.path.join(victim, "config.json")))["train"]["config"]
    assert train_cfg["tokenizer"] == os.path.join(out, "tokenizer.json")  # where the folder is now


def test_analysis_links_hold_in_a_moved_folder_and_old_absolute_ones_are_redone(tmp_path):
    ctx = SimpleNamespace(out=str(tmp_path / "a"))
    for key in ("clm-prenorm", "clm-normformer"):
        folder = tmp_path / "a" / "runs" / key / "seed1"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_text(key)
    links = analysis_experiment._named_links(ctx, ("clm-prenorm", "clm-normformer"), 1)
    stale = links[1]
    os.remove(stale)
    os.symlink(os.path.abspath(run_specs.run_dir(ctx, "clm-normformer", 1)), stale)  # an older nfeval's link
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = SimpleNamespace(out=str(tmp_path / "b"))

    links = analysis_experiment._named_links(moved, ("clm-prenorm", "clm-normformer"), 1)

    assert [open(os.path.join(link, "model.safetensors")).read() for link in links] == [
        "clm-prenorm",
        "clm-normformer",
    ]


def test_a_finished_run_without_its_gradient_record_is_named_not_dropped(tmp_path):
    """A run folder that kept its logs but not its gradient record (what a landed report folder keeps)
    is an error naming the run and what to do; a run that recorded no gradients is simply None."""
    import pytest

    from nfeval.base.errors import ConfigError

    recorded, plain = tmp_path / "recorded", tmp_path / "plain"
    for folder, grad_stats in ((recorded, "1:8"), (plain, None)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"train": {"grad_stats": grad_stats}}))
    assert runs.grad_stats_path(str(plain)) is None
    with pytest.raises(
        ConfigError, match=r"recorded: finished, but its gradient record \(grad_stats.jsonl\)"
    ):
        runs.grad_stats_path(str(recorded))
    (recorded / "grad_stats.jsonl").write_text("")
    assert runs.grad_stats_path(str(recorded)) == str(recorded / "grad_stats.jsonl")


def test_a_folder_knows_its_corpus_by_what_it_holds_not_where_it_lies(tmp_path, monkeypatch):
    import pytest
    from conftest import make_corpus

    from nfeval.base.errors import ConfigError
    from nfeval.pipelines import context

    text = make_corpus(50)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "train.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b" / "train.txt").write_text(text, encoding="utf-8")  # the same corpus, elsewhere
    (tmp_path / "other.txt").write_text(make_corpus(50, seed=1), encoding="utf-8")
    path = str(tmp_path / "settings.json")

    def settings(train: str) -> dict:
        return context.with_corpus_fingerprint({"scale": "tiny", "corpus": [train, None]})

    context.keep_settings(path, settings(str(tmp_path / "a" / "train.txt")))
    context.check_settings(path, settings(str(tmp_path / "b" / "train.txt")), "advice")  # moved: the same
    with pytest.raises(ConfigError, match="this folder was made with .*; advice"):
        context.check_settings(path, settings(str(tmp_path / "other.txt")), "advice")
    with pytest.raises(ConfigError):  # another setting still differs
        context.check_settings(path, {**settings(str(tmp_path / "b" / "train.txt")), "scale": "small"}, "a")
    # a folder made before corpus fingerprints: the same file reached by another spelling of its path
    old = str(tmp_path / "old.json")
    json.dump({"scale": "tiny", "corpus": ["a/train.txt", None]}, open(old, "w"))
    monkeypatch.chdir(tmp_path)
    context.check_settings(old, settings(str(tmp_path / "a" / "train.txt")), "advice")
    with pytest.raises(ConfigError):
        context.check_settings(old, settings(str(tmp_path / "b" / "train.txt")), "advice")
