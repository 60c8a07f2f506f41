"""Corpora, token shards, batches and MLM masking (nfeval.engine.text.data)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_corpus, make_text

from nfeval.engine.text import builtin_corpus, data
from nfeval.engine.text.tokenization import special_ids, train_bpe

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_corpus(path: Path, n_docs: int = 40, seed: int = 0) -> Path:
    path.write_text(make_corpus(n_docs * 5, per_doc=5, seed=seed), encoding="utf-8")
    return path


def test_default_corpus_is_deterministic_english_with_fixed_split():
    a, b = builtin_corpus.default_corpus(), builtin_corpus.default_corpus()
    assert a.fingerprint == b.fingerprint and a.train == b.train and a.valid == b.valid
    total = sum(map(len, a.train)) + sum(map(len, a.valid))
    assert total > 300_000
    assert 0.02 < sum(map(len, a.valid)) / total < 0.1
    assert " the " in "".join(a.train[:10])
    assert not set(a.train) & set(a.valid)


def test_text_file_documents_and_split(tmp_path):
    corpus = data.load_text_corpus(str(write_corpus(tmp_path / "c.txt", n_docs=40)))
    assert len(corpus.train) == 38 and len(corpus.valid) == 2  # last 5% of 40 documents
    assert all("\n\n" not in d for d in corpus.train)
    valid = write_corpus(tmp_path / "v.txt", n_docs=3, seed=1)
    explicit = data.load_text_corpus(str(tmp_path / "c.txt"), str(valid))
    assert len(explicit.train) == 40 and len(explicit.valid) == 3
    assert explicit.fingerprint != corpus.fingerprint


def test_folder_reads_every_file_in_path_order(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("second doc\n", encoding="utf-8")
    (tmp_path / "d" / "a.txt").write_text("first doc\n\nalso first file\n", encoding="utf-8")
    (tmp_path / "d" / ".hidden").write_text("skip me\n", encoding="utf-8")
    assert data.read_documents(str(tmp_path / "d")) == ["first doc", "also first file", "second doc"]


def test_non_utf8_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nsecond \xff line\n")
    with pytest.raises(ValueError, match=r"bad\.txt: not UTF-8 text: invalid byte 0xff at line 2"):
        data.load_text_corpus(str(bad))


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_compressed_files_give_the_plain_files_corpus_and_tokens(tmp_path, cache, suffix):
    import gzip
    import lzma

    opener = {".xz": lzma.open, ".gz": gzip.open}[suffix]
    text = "\n\n".join(make_text(40))
    plain = {name: tmp_path / f"{name}.txt" for name in ("train", "valid")}
    packed = {name: tmp_path / f"{name}.txt{suffix}" for name in plain}
    for name in plain:
        body = text if name == "train" else "\n\n".join(make_text(6))
        plain[name].write_text(body, encoding="utf-8")
        with opener(packed[name], "wb") as f:
            f.write(body.encode("utf-8"))
    a = data.load_text_corpus(str(plain["train"]), str(plain["valid"]))
    b = data.load_text_corpus(str(packed["train"]), str(packed["valid"]))
    assert (a.train, a.valid, a.fingerprint) == (b.train, b.valid, b.fingerprint)
    tok = train_bpe(a.train, 300)
    shards_a, shards_b = data.token_shards(a, tok), data.token_shards(b, tok)
    assert shards_a.path == shards_b.path  # one cache entry: keyed by the text, not the file
    assert np.array_equal(shards_a.train, shards_b.train) and np.array_equal(shards_a.valid, shards_b.valid)


def test_damaged_compressed_file_names_the_file(tmp_path):
    bad = tmp_path / "corpus.txt.xz"
    bad.write_bytes(b"not xz at all")
    with pytest.raises(ValueError, match=r"corpus\.txt\.xz: not a readable \.xz file"):
        data.load_text_corpus(str(bad))


def test_empty_corpus_fails_clearly(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.txt: empty"):
        data.load_text_corpus(str(empty))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        data.load_text_corpus(str(tmp_path / "missing.txt"))


def test_hf_dataset_by_builder_name(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": s}) + "\n" for s in make_text(60)), encoding="utf-8")
    corpus = data.load_hf_corpus("json", data_files={"train": str(rows)})
    assert len(corpus.train) == 57 and len(corpus.valid) == 3 and corpus.name == "hf:json"
    with pytest.raises(ValueError, match="no column 'body'"):
        data.load_hf_corpus("json", text_column="body", data_files={"train": str(rows)})


def test_token_shards_are_cached_and_exact(tmp_path, cache):
    corpus = data.load_text_corpus(str(write_corpus(tmp_path / "c.txt")))
    tok = data.get_tokenizer(None, corpus, 300)
    assert tok.get_vocab_size() <= 300
    shards = data.token_shards(corpus, tok)
    eos = special_ids(tok).eos
    expected = np.concatenate(
        [np.array(tok.encode(d, add_special_tokens=False).ids + [eos]) for d in corpus.train]
    )
    assert shards.train.dtype == np.uint16
    np.testing.assert_array_equal(np.asarray(shards.train), expected)
    bin_path = os.path.join(shards.path, "train.bin")
    mtime = os.stat(bin_path).st_mtime_ns
    again = data.token_shards(corpus, data.get_tokenizer(None, corpus, 300))  # tokenizer from cache too
    assert again.fingerprint == shards.fingerprint and os.stat(bin_path).st_mtime_ns == mtime
    other = data.token_shards(corpus, train_bpe(corpus.train, 280))
    assert other.fingerprint != shards.fingerprint


def test_blocks_cover_each_epoch_once_and_are_reproducible():
    tokens = np.arange(1001, dtype=np.uint16)
    blocks = data.Blocks(tokens, seq_len=10, objective="clm", bos=0, seed=3)
    assert blocks.n_blocks == 100
    epoch = blocks.get(0, 100)
    assert epoch.shape == (100, 11)
    assert sorted(epoch[:, 0].tolist()) == list(range(0, 1000, 10))
    assert torch.equal(epoch[:, 1:], epoch[:, :-1] + 1)  # contiguous spans of the stream
    assert torch.equal(data.Blocks(tokens, 10, "clm", 0, seed=3).get(37, 5), epoch[37:42])
    assert not torch.equal(blocks.get(100, 100), epoch)  # reshuffled next epoch
    mlm = data.Blocks(tokens, seq_len=10, objective="mlm", bos=0, seed=3).get(0, 4)
    assert mlm.shape == (4, 10) and (mlm[:, 0] == 0).all()


def test_mlm_masking_is_roberta_80_10_10():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 1000, (200, 500))
    tokens[:, 0] = 0  # <s>, never masked
    special = torch.tensor([0, 1, 2, 4])
    replacements = torch.arange(5, 1000)
    inputs, targets = data.mask_tokens(tokens, 4, special, replacements, g)
    chosen = targets != -100
    assert not chosen[:, 0].any()
    assert torch.equal(targets[chosen], tokens[chosen])
    assert torch.equal(inputs[~chosen], tokens[~chosen])
    rate = chosen.float().mean().item()
    assert abs(rate - 0.15) < 0.005
    as_mask = (inputs[chosen] == 4).float().mean().item()
    unchanged = (inputs[chosen] == tokens[chosen]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.01
    assert abs(unchanged - 0.1) < 0.01  # plus ~0.1% random draws that hit the same id
    g2 = torch.Generator().manual_seed(0)
    assert torch.equal(data.mask_tokens(tokens, 4, special, replacements, g2)[0], inputs)


@pytest.mark.skipif(
    not (SHARED / "tokenizer" / "gpt2").is_dir(), reason="shared GPT-2 tokenizer files absent"
)
def test_gpt2_tokenizer_files(tmp_path):
    corpus = data.load_text_corpus(str(write_corpus(tmp_path / "c.txt")))
    tok = data.get_tokenizer(str(SHARED / "tokenizer" / "gpt2"), corpus, 0)
    shards = data.token_shards(corpus, tok)
    assert shards.specials.eos == 50256
    assert int(shards.train[-1]) == 50256
    assert tok.decode(shards.train[:20].tolist()).startswith(corpus.train[0][:10])
