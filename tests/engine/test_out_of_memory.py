"""A batch that does not fit on the device (nfeval.engine.training.out_of_memory): one line naming the
batch and the largest that fits, exit status 2, and a run folder a rerun with a smaller batch starts
cleanly in.
The device's memory is simulated: the model's forward raises torch.OutOfMemoryError above k sequences."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_corpus, tiny_train_args

from nfeval import cli
from nfeval.base.device_memory import halving_search
from nfeval.engine.model.model import Transformer

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total capacity)"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text(make_corpus(600), encoding="utf-8")
    return str(path)


def memory_of(monkeypatch, k: int, after_calls: int = 0) -> None:
    """Makes the model's forward raise torch.OutOfMemoryError on more than ``k`` sequences, once it has
    run ``after_calls`` times."""
    real = Transformer.encode
    calls = []

    def encode(self, idx, *args, **kwargs):
        calls.append(idx.shape[0])
        if len(calls) > after_calls and idx.shape[0] > k:
            raise torch.OutOfMemoryError(OOM)
        return real(self, idx, *args, **kwargs)

    monkeypatch.setattr(Transformer, "encode", encode)


def run_files(run: Path) -> set[str]:
    return {p.name for p in run.iterdir()} if run.is_dir() else set()


def test_halving_search_returns_the_largest_halving_that_fits():
    freed = []

    def fits(k):
        def step(rows):
            if rows > k:
                raise torch.OutOfMemoryError(OOM)

        return step

    assert halving_search(fits(5), 32, lambda: freed.append(1)) == 4  # 16, 8 fail; 4 fits
    assert len(freed) == 3  # memory freed before every try
    assert halving_search(fits(31), 32, lambda: None) == 16
    assert halving_search(fits(0), 8, lambda: None) == 0  # not even one sequence
    assert halving_search(fits(3), 12, lambda: None) == 3  # 6, then 3


def test_a_batch_that_does_not_fit_is_one_line_and_leaves_nothing(corpus, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    memory_of(monkeypatch, k=3)
    argv = ["train", *tiny_train_args(corpus, batch_size=8, max_steps=4, ckpt_interval=2), "--out", str(run)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "8 × 32 tokens" in err and "does not fit in the memory of cpu" in err
    assert "the largest that fits is 2 × 32" in err and "--batch-size 2 --grad-accum 4" in err
    assert run_files(run) <= {".lock"}, run_files(run)  # no config, metrics, checkpoint or record
    monkeypatch.undo()
    again = ["train", *tiny_train_args(corpus, batch_size=2, max_steps=2), "--out", str(run)]
    assert cli.main(again) == 0  # the same folder, a smaller batch: a fresh start, not "already holds a run"
    assert (run / "complete.json").is_file()


def test_grad_accum_is_named_and_kept_in_the_hint(corpus, tmp_path, monkeypatch, capsys):
    memory_of(monkeypatch, k=5)
    flags = tiny_train_args(corpus, batch_size=8, grad_accum=3, max_steps=2)
    assert cli.main(["train", *flags, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grad_accum 3" in err
    assert "the largest that fits is 4 × 32" in err and "--batch-size 4 --grad-accum 6" in err


def test_a_run_with_a_checkpoint_keeps_it_and_says_how_to_go_on(corpus, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    memory_of(monkeypatch, k=2, after_calls=3)  # steps 1-3 fit; step 4 does not
    flags = tiny_train_args(corpus, batch_size=4, max_steps=6, ckpt_interval=2)
    assert cli.main(["train", *flags, "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "the largest that fits is 2 × 32" in err and "resume on a device with more memory" in err
    assert not (run / "complete.json").exists() and not (run / "model.safetensors").exists()
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_00000002"]
    monkeypatch.undo()
    assert cli.main(["train", *flags, "--out", str(run), "--resume"]) == 0
    assert (run / "complete.json").is_file()
