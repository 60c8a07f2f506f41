"""A killed run folder moved elsewhere, with its data and tokenizer moved too, resumes there when given
the new paths: the resume compares what the files hold, not where they are; changed text is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import make_corpus, make_text, tiny_train_args

from nfeval import cli
from nfeval.engine.checkpoints import rundir
from nfeval.engine.text.tokenization import train_bpe


def write_inputs(folder) -> None:
    folder.mkdir(parents=True)
    (folder / "train.txt").write_text(make_corpus(600))
    (folder / "tokenizer.json").write_text(train_bpe(make_text(300), 300).to_str())


def args(data) -> list[str]:
    return tiny_train_args(
        str(data / "train.txt"), tokenizer=str(data / "tokenizer.json"), vocab_size=None, ckpt_interval=3
    )


def losses(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in rundir.read_metrics(str(run), "train")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A finished run in ``root/a/run`` on ``root/data``; returns root."""
    root = tmp_path_factory.mktemp("moved")
    write_inputs(root / "data")
    assert cli.main(["train", "--out", str(root / "a" / "run"), *args(root / "data")]) == 0
    return root


def test_a_moved_killed_run_resumes_on_moved_data(reference, tmp_path, capsys):
    run, data = tmp_path / "b" / "run", tmp_path / "data"
    shutil.copytree(reference / "a" / "run", tmp_path / "copy")
    shutil.move(tmp_path / "copy", run)
    (run / "complete.json").unlink()  # as if killed during the final save
    shutil.copytree(reference / "data", data)

    assert cli.main(["train", "--out", str(run), "--resume", *args(data)]) == 0

    assert "resuming from " + str(run / "checkpoints" / "step_00000006") in capsys.readouterr().err
    assert losses(run) == losses(reference / "a" / "run")
    saved = json.loads((run / "config.json").read_text())["train"]["config"]
    assert saved["train_data"] == str(data / "train.txt")  # the resumed run records where its data is now
    assert saved["tokenizer"] == str(data / "tokenizer.json")


def test_changed_text_at_a_new_path_is_refused(reference, tmp_path, capsys):
    run, data = tmp_path / "run", tmp_path / "data"
    shutil.copytree(reference / "a" / "run", run)
    (run / "complete.json").unlink()
    shutil.copytree(reference / "data", data)
    corpus = data / "train.txt"
    corpus.write_text(corpus.read_text().replace("cat", "cow"))

    assert cli.main(["train", "--out", str(run), "--resume", *args(data)]) == 2
    err = capsys.readouterr().err
    assert "cannot change on resume (train_data:" in err and "tokenizer" not in err  # it is the same
