"""A tune folder moved or copied elsewhere, with its data and tokenizer, keeps its finished points; a
data file whose content changed does not; keys an older nfeval wrote (input paths) still match in place."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from conftest import make_corpus, make_text, tiny_train_config

from nfeval.base.errors import ConfigError
from nfeval.engine.text.tokenization import train_bpe
from nfeval.engine.training.train_config import resolved_warmup
from nfeval.tune import points as tune_points
from nfeval.tune import sweep as tune

GRID = (["prenorm-tiny"], [1e-3, 1e-2], "steps=4")


def write_inputs(folder) -> tuple[str, str]:
    """Writes a corpus and a tokenizer.json into ``folder``; returns their paths."""
    folder.mkdir(parents=True)
    corpus, tokenizer = folder / "train.txt", folder / "tokenizer.json"
    corpus.write_text(make_corpus(300))
    tokenizer.write_text(train_bpe(make_text(300), 300).to_str())
    return str(corpus), str(tokenizer)


def config(corpus: str, tokenizer: str, **changes):
    return tiny_train_config(corpus, tokenizer=tokenizer, vocab_size=None, log_interval=0, **changes)


def no_training(cfg, out_dir, resume=False):
    raise AssertionError(f"trained {out_dir} again")


def point_files(out) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, tune.POINT), out): os.stat(os.path.join(d, tune.POINT)).st_mtime_ns
        for d, _, files in os.walk(out)
        if tune.POINT in files
    }


def results(summary: dict) -> dict:
    """Returns tune.json less what names where the folder lies."""
    points = [{k: v for k, v in p.items() if k != "run_dir"} for p in summary["points"]]
    base = {k: v for k, v in summary["base_config"].items() if k not in ("train_data", "tokenizer")}
    return {"presets": summary["presets"], "points": points, "base": base, "missing": summary["missing"]}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-point tune in ``root/a/tune`` on ``root/data``; returns (root, its tune.json)."""
    root = tmp_path_factory.mktemp("movable")
    corpus, tokenizer = write_inputs(root / "data")
    summary = tune.tune(config(corpus, tokenizer), *GRID, str(root / "a" / "tune"), progress=False)
    assert [p["status"] for p in summary["points"]] == ["ok", "ok"]
    return root, summary


@pytest.mark.parametrize("moved", ["folder", "data", "both"])
def test_a_moved_tune_or_moved_data_reuses_every_point(finished, tmp_path, monkeypatch, moved):
    root, first = finished
    here = tmp_path / "here" / "tune"
    shutil.copytree(root / "a" / "tune", here)
    written = point_files(here)
    out = tmp_path / "elsewhere" / "tune" if moved in ("folder", "both") else here
    shutil.move(here, out)
    data = tmp_path / "data2" if moved in ("data", "both") else root / "data"
    if moved != "folder":
        shutil.copytree(root / "data", data)  # the same files at another path
    corpus, tokenizer = str(data / "train.txt"), str(data / "tokenizer.json")
    monkeypatch.setattr(tune, "train", no_training)

    again = tune.tune(config(corpus, tokenizer), *GRID, str(out), progress=False)

    assert point_files(out) == written and len(written) == 2
    assert results(again) == results(first)
    assert {p["run_dir"] for p in again["points"]} == {
        str(out / "points" / "prenorm-tiny" / lr / "seed=1") for lr in ("lr=0.001", "lr=0.01")
    }
    assert again["base_config"]["train_data"] == corpus  # where the data is now


def test_changed_data_content_is_refused(finished, tmp_path):
    root, _ = finished
    out = tmp_path / "tune"
    shutil.copytree(root / "a" / "tune", out)
    shutil.copytree(root / "data", tmp_path / "data")
    corpus, tokenizer = tmp_path / "data" / "train.txt", str(tmp_path / "data" / "tokenizer.json")
    corpus.write_text(corpus.read_text().replace("cat", "cow"))
    with pytest.raises(ConfigError, match="different data or tokenizer contents"):
        tune.tune(config(str(corpus), tokenizer), *GRID, str(out), progress=False)


def test_a_moved_killed_point_resumes_at_its_new_path(finished, tmp_path, monkeypatch):
    root, first = finished
    out = tmp_path / "tune"
    shutil.copytree(root / "a" / "tune", out)
    shutil.copytree(root / "data", tmp_path / "data2")
    killed = out / "points" / "prenorm-tiny" / "lr=0.001" / "seed=1"
    for name in (tune.POINT, "complete.json", "model.safetensors"):  # killed before its final save
        (killed / name).unlink()
    calls = []
    real_train = tune.train

    def counted(cfg, out_dir, resume=False):
        calls.append(out_dir)
        return real_train(cfg, out_dir, resume)

    monkeypatch.setattr(tune, "train", counted)
    cfg = config(str(tmp_path / "data2" / "train.txt"), str(tmp_path / "data2" / "tokenizer.json"))

    again = tune.tune(cfg, *GRID, str(out), progress=False)

    assert calls == [str(killed)]  # train's own resume takes the moved data: same content
    assert json.loads((killed / "config.json").read_text())["train"]["config"]["train_data"] == cfg.train_data
    assert again["points"][0]["val_loss"] == pytest.approx(first["points"][0]["val_loss"])


def test_an_older_key_of_paths_matches_in_place_and_is_rewritten(finished, tmp_path, monkeypatch):
    root, _ = finished
    out = tmp_path / "tune"
    shutil.copytree(root / "a" / "tune", out)
    cfg = config(str(root / "data" / "train.txt"), str(root / "data" / "tokenizer.json"))
    marker = out / "points" / "prenorm-tiny" / "lr=0.001" / "seed=1" / tune.POINT
    point_cfg = tune_points.point_config(cfg, "prenorm-tiny", 1e-3, 1, tune.parse_budget(GRID[2]))
    old_key = {k: v for k, v in dataclasses.asdict(point_cfg).items() if k not in tune_points.NOT_IN_KEY}
    old_key["warmup"] = resolved_warmup(point_cfg)  # an older nfeval's default was the number itself
    # the key as an older nfeval wrote it: the config, input paths included
    marker.write_text(json.dumps(json.loads(marker.read_text()) | {"key": old_key}))
    monkeypatch.setattr(tune, "train", no_training)

    moved = config(str(tmp_path / "train.txt"), cfg.tokenizer)
    shutil.copy(cfg.train_data, moved.train_data)
    with pytest.raises(ConfigError, match="different train_data than now .an older"):  # paths alone
        tune.tune(moved, *GRID, str(out), progress=False)

    tune.tune(cfg, *GRID, str(out), progress=False)  # in place: skipped, its key rewritten
    key = json.loads(marker.read_text())["key"]
    assert "inputs" in key and "train_data" not in key
    tune.tune(moved, *GRID, str(out), progress=False)  # now it can move


def test_a_committed_tune_of_point_files_alone_reuses_every_point(finished, tmp_path, monkeypatch):
    """What a committed report folder keeps of its tune (its records archive: each point's point.json, not
    its run folder) is a finished tune: a long tune lands in pieces, and a fresh clone goes on from them."""
    from nfeval.pipelines import archive

    root, first = finished
    repo = tmp_path / "clone"
    shutil.copytree(root / "a" / "tune", repo / "tune" / "clm")  # as reproduce lays it out
    archive.pack(str(repo))
    points = sorted(p for p in archive.members(str(repo)) if p.startswith("tune/clm/points/"))
    assert points == [
        f"tune/clm/points/prenorm-tiny/{lr}/seed=1/point.json" for lr in ("lr=0.001", "lr=0.01")
    ]
    committed = tmp_path / "fresh"
    committed.mkdir()
    shutil.copy(repo / archive.ARCHIVE, committed / archive.ARCHIVE)  # the archive alone
    assert sorted(p for p in archive.unpack(str(committed)) if p.startswith("tune/clm/points/")) == points
    monkeypatch.setattr(tune, "train", no_training)

    again = tune.tune(config(*[str(root / "data" / n) for n in ("train.txt", "tokenizer.json")]), *GRID,
                      str(committed / "tune" / "clm"), progress=False)  # fmt: skip

    assert results(again) == results(first)
