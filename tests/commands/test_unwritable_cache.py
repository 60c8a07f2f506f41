"""A cache folder that cannot be written (a read-only home; issue 55): caches that only save time are
skipped, and the one a run needs (its token streams) is refused in one line naming NFEVAL_CACHE."""

from __future__ import annotations

from conftest import tiny_train_args

from nfeval.cli import main
from nfeval.engine.training import input_fingerprints


def test_an_unwritable_cache_is_one_line_naming_the_variable(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("not a folder")  # even root cannot make a folder under a file
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "afile" / "cache"))
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(f"line {i} of some text to train on.\n" for i in range(300)))
    # the corpus fingerprint's cache only saves time: unwritable, it is computed and not kept
    assert input_fingerprints.corpus_fingerprint(str(corpus), None)
    argv = ["train", "--preset", "prenorm-tiny", "--train-data", str(corpus), "--vocab-size", "300"]
    assert main([*argv, "--max-steps", "1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set NFEVAL_CACHE to a writable folder" in err, err


def test_a_read_only_home_caches_in_a_temporary_folder_said_in_one_line(
    tmp_path, small_corpus, monkeypatch, capsys
):
    (tmp_path / "home").write_text("a file where the home should be")  # ~/.cache cannot be made
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NFEVAL_CACHE")
    assert main(["train", "--out", str(tmp_path / "run"), *tiny_train_args(small_corpus, max_steps=1)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "cannot be written; caching in" in line]
    assert len(said) == 1 and "set NFEVAL_CACHE to a writable folder to keep the cache" in said[0], said
    assert (tmp_path / "run" / "model.safetensors").is_file()
