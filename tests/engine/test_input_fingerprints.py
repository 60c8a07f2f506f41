"""Input fingerprints: the corpus fingerprint runs record, cached under the files' stats, so a rerun
over unchanged files reads none of them and a rewritten file is read again."""

from __future__ import annotations

import os

import pytest
from conftest import make_corpus

from nfeval.engine.text.data import load_text_corpus
from nfeval.engine.training import input_fingerprints as inputs


def test_corpus_fingerprint_is_the_recorded_one_cached_until_a_file_changes(tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(make_corpus(60))
    (folder / "b.txt").write_text(make_corpus(60, seed=1))
    want = load_text_corpus(str(folder)).fingerprint
    assert inputs.corpus_fingerprint(str(folder), None) == want

    def unread(*args):
        raise AssertionError("read the corpus again")

    monkeypatch.setattr(inputs, "load_text_corpus", unread)
    assert inputs.corpus_fingerprint(str(folder), None) == want  # unchanged files: from the cache
    with pytest.raises(AssertionError, match="read the corpus again"):  # a held-out file is another corpus
        inputs.corpus_fingerprint(str(folder / "a.txt"), str(folder / "b.txt"))

    monkeypatch.undo()
    text = (folder / "b.txt").read_text()
    (folder / "b.txt").write_text(text.replace("cat", "cow"))  # the same size, other text
    os.utime(folder / "b.txt", ns=(1, 1))
    changed = inputs.corpus_fingerprint(str(folder), None)
    assert changed != want and changed == load_text_corpus(str(folder)).fingerprint
