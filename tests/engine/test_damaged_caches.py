"""A damaged entry of nfeval's caches (the trained tokenizer, the token shards) is built again, never a
traceback nor a run on wrong tokens."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from conftest import make_corpus, tiny_train_args

from nfeval import cli


def train(out: Path, corpus: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["train", "--out", str(out), *tiny_train_args(corpus, max_steps=2)])
    return code, err.getvalue()


@pytest.fixture
def warm(tmp_path, monkeypatch):
    """A cache holding one run's tokenizer and token shards; returns (corpus, cache folder)."""
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300), encoding="utf-8")
    assert train(tmp_path / "warm", str(corpus))[0] == 0
    return str(corpus), tmp_path / "cache"


def damage_meta(text: str) -> str:
    return text.replace('"dtype": "uint16"', '"dtype": "bogus"')


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("meta.json", lambda text: "{"),
        ("meta.json", damage_meta),
        ("train.bin", lambda data: data[:100]),
    ],
)
def test_a_damaged_token_shard_entry_is_built_again(warm, tmp_path, name, damage):
    corpus, cache = warm
    [path] = (cache / "tokens").glob(f"*/{name}")
    whole = path.read_bytes()
    path.write_bytes(damage(whole.decode()).encode() if name.endswith(".json") else damage(whole))
    code, err = train(tmp_path / "run", corpus)
    assert code == 0, err
    assert path.read_bytes() == whole


def test_a_damaged_trained_tokenizer_is_trained_again(warm, tmp_path):
    corpus, cache = warm
    [path] = (cache / "tokenizers").glob("*.json")
    whole = path.read_text()
    path.write_text("{garbage")
    code, err = train(tmp_path / "run", corpus)
    assert code == 0, err
    assert path.read_text() == whole
