"""Corpora, tokenizers, token shards and batches for pretraining.

A corpus is a list of training documents and a list of validation documents. It comes from text
files or folders (documents are separated by blank lines; a file ending in ``.xz`` or ``.gz`` is read
decompressed, so a corpus is fingerprinted and cached by its text, not by its compression), a Hugging
Face dataset, or the embedded
default corpus: the English documentation every CPython install carries (``pydoc_data.topics`` and
the standard library's docstrings), so that training works offline on a fresh machine. Without an
explicit validation set the last 5% of documents are held out (a fixed split).

Documents are tokenized, each followed by EOS, and concatenated into one token stream per split,
stored as a numpy memmap in ``$NFEVAL_CACHE`` (default ``~/.cache/nfeval``) under a fingerprint of
corpus + tokenizer, so a second run on the same data starts at once.

Batches are fixed-length blocks of the stream (fairseq's ``--sample-break-mode none``) in an order
shuffled once per epoch. Sample ``k`` of a run is a pure function of (seed, k), so the data position
of a run is just the number of samples it has consumed and resuming needs no loader state. MLM
masking (RoBERTa: 15% of tokens; of those 80% ``<mask>``, 10% random, 10% unchanged) is drawn from a
generator seeded by (seed, step) over the whole global batch, so it does not depend on how the batch
is split across processes.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import lzma
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from ...base.artifacts import atomic_write_json, atomic_write_text, cache_dir
from ...base.errors import DataError, MissingDataError, OutputError, hub_unreachable
from ...base.fingerprint import canonical_tokenizer_json
from ...base.jsonio import load_json
from .tokenization import SpecialIds, load_tokenizer, special_ids, train_bpe

VALID_FRACTION = 0.05


@dataclass
class Corpus:
    name: str
    train: list[str]
    valid: list[str]
    fingerprint: str  # sha256 of the documents of both splits

    def describe(self) -> dict:
        """Returns the JSON block runs record about their data."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "train_documents": len(self.train),
            "valid_documents": len(self.valid),
            "train_chars": sum(map(len, self.train)),
            "valid_chars": sum(map(len, self.valid)),
        }


def fingerprint_documents(train: list[str], valid: list[str]) -> str:
    """Returns the sha256 of the two document lists (boundaries included)."""
    h = hashlib.sha256()
    for split, docs in (("train", train), ("valid", valid)):
        h.update(f"{split}:{len(docs)}\n".encode())
        for doc in docs:
            data = doc.encode("utf-8")
            h.update(f"{len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


def make_corpus(name: str, train: list[str], valid: list[str] | None = None) -> Corpus:
    """Returns a Corpus; without ``valid`` the last 5% of documents (at least one) are held out."""
    train = [d for d in train if d.strip()]
    if valid is None:
        train, valid = split_documents(train, name)
    valid = [d for d in valid if d.strip()]
    if not train:
        raise DataError(f"{name}: no training text (the corpus is empty)")
    if not valid:
        raise DataError(f"{name}: no validation text (the validation corpus is empty)")
    return Corpus(name=name, train=train, valid=valid, fingerprint=fingerprint_documents(train, valid))


def split_documents(docs: list[str], name: str) -> tuple[list[str], list[str]]:
    """Returns (train, valid): the last 5% of documents are validation; a lone document is split by lines."""
    if len(docs) == 1:
        docs = [line for line in docs[0].split("\n") if line.strip()]
    if len(docs) < 2:
        raise DataError(
            f"{name}: too little text for a validation split (need at least 2 lines); pass validation data"
        )
    n_valid = max(1, math.ceil(VALID_FRACTION * len(docs)))
    return docs[:-n_valid], docs[-n_valid:]


# a file with one of these endings is read through its decompressor; any other file as it is
DECOMPRESSORS = {".xz": lzma.open, ".gz": gzip.open}


def read_text_file(path: str) -> str:
    """Returns a file's text (decompressed when its name ends in ``.xz`` or ``.gz``); non-UTF-8 bytes fail
    with the line and byte offset, a damaged compressed file with what its decompressor said."""
    opener = DECOMPRESSORS.get(os.path.splitext(path)[1].lower(), open)
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (lzma.LZMAError, gzip.BadGzipFile, EOFError) as e:
        raise DataError(f"{path}: not a readable {os.path.splitext(path)[1]} file ({e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        where = " (decompressed)" if opener is not open else ""
        raise DataError(
            f"{path}: not UTF-8 text{where}: invalid byte 0x{data[e.start]:02x} at line {line} (byte offset "
            f"{e.start})"
        ) from None


def read_documents(path: str) -> list[str]:
    """Returns the documents (blank-line separated) of a text file, or of every file under a folder in
    path order."""
    if os.path.isdir(path):
        files = sorted(
            str(p)
            for p in Path(path).rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise DataError(f"{path}: folder holds no text files")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise MissingDataError(f"{path}: no such file or folder")
    docs: list[str] = []
    for file in files:
        text = read_text_file(file).replace("\r\n", "\n")
        file_docs = [d.strip("\n") for d in text.split("\n\n") if d.strip()]
        if not file_docs:
            raise DataError(f"{file}: empty (no text)")
        docs.extend(file_docs)
    return docs


def load_text_corpus(train_path: str, valid_path: str | None = None) -> Corpus:
    """Returns the corpus of text files/folders (a fixed 5% split of the training text without
    ``valid_path``)."""
    train = read_documents(train_path)
    valid = read_documents(valid_path) if valid_path else None
    return make_corpus(os.path.abspath(train_path), train, valid)


def load_hf_corpus(name: str, config: str | None = None, text_column: str = "text", **kwargs) -> Corpus:
    """Returns a corpus from a Hugging Face dataset (``datasets.load_dataset``): its train split, and its
    validation split if it has one (else the fixed 5% split). Fails clearly when it cannot be loaded."""
    import datasets

    try:
        ds = datasets.load_dataset(name, config, **kwargs)
    except Exception as e:  # offline hub, unknown name, bad config: all reported the same way
        raise hub_unreachable(
            f"dataset {name!r}", e, "pass --train-data with local text files instead"
        ) from None
    if "train" not in ds:
        raise DataError(f"dataset {name!r}: no 'train' split (has {list(ds)})")
    if text_column not in ds["train"].column_names:
        raise DataError(
            f"dataset {name!r}: no column {text_column!r} (has {ds['train'].column_names}); pass "
            "--text-column"
        )
    valid_split = next((s for s in ("validation", "valid", "test") if s in ds), None)
    valid = list(ds[valid_split][text_column]) if valid_split else None
    return make_corpus(f"hf:{name}" + (f"/{config}" if config else ""), list(ds["train"][text_column]), valid)


def get_tokenizer(spec: str | None, corpus: Corpus, vocab_size: int) -> Tokenizer:
    """Returns the tokenizer at ``spec`` (tokenizer.json or GPT-2 folder), or a byte-level BPE of
    ``vocab_size`` trained on the corpus' training documents (cached by corpus fingerprint)."""
    if spec:
        return load_tokenizer(spec)
    key = hashlib.sha256(f"{corpus.fingerprint}|bpe|{vocab_size}".encode()).hexdigest()[:20]
    path = os.path.join(cache_dir(), "tokenizers", f"{key}.json")
    if os.path.isfile(path):
        with contextlib.suppress(DataError):  # a damaged cache entry is trained again
            return load_tokenizer(path)
    tok = train_bpe(corpus.train, vocab_size)
    with contextlib.suppress(OutputError):  # a cache that cannot be written (a read-only home) keeps nothing
        atomic_write_text(path, tok.to_str())
    return tok


def token_dtype(vocab_size: int) -> type:
    """Returns the smallest unsigned numpy dtype that holds every token id."""
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def encode_documents(tok: Tokenizer, docs: list[str], eos: int, chunk: int = 1024) -> np.ndarray:
    """Returns the token stream of ``docs``: each document's ids followed by EOS."""
    dtype = token_dtype(tok.get_vocab_size())
    parts = []
    for i in range(0, len(docs), chunk):
        for enc in tok.encode_batch(docs[i : i + chunk], add_special_tokens=False):
            parts.append(np.asarray(enc.ids + [eos], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


@dataclass
class TokenData:
    train: np.ndarray  # read-only memmap of the training stream
    valid: np.ndarray
    fingerprint: str  # sha256 of corpus fingerprint + tokenizer
    path: str
    specials: SpecialIds

    def describe(self) -> dict:
        """Returns the JSON block runs record about their token shards."""
        return {
            "fingerprint": self.fingerprint,
            "train_tokens": int(len(self.train)),
            "valid_tokens": int(len(self.valid)),
            "path": self.path,
        }


def token_shards(corpus: Corpus, tok: Tokenizer) -> TokenData:
    """Returns the corpus' token streams as memmaps, building them into the cache on first use."""
    specials = special_ids(tok)
    fingerprint = hashlib.sha256(f"{corpus.fingerprint}|{canonical_tokenizer_json(tok)}".encode()).hexdigest()
    folder = os.path.join(cache_dir(), "tokens", fingerprint[:20])
    meta_path = os.path.join(folder, "meta.json")
    dtype = token_dtype(tok.get_vocab_size())
    if os.path.isfile(meta_path):  # meta.json is written last: its presence means the shards are complete
        with contextlib.suppress(DataError):  # unless the entry was damaged since: it is built again
            data = open_token_shards(folder, specials)
            if data.fingerprint == fingerprint:
                return data
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # the token streams are read as memmaps from here: this cache is needed
        why = e.strerror or e
        raise OutputError(
            f"{folder}: cannot write the token cache ({why}); set NFEVAL_CACHE to a writable folder"
        ) from None
    lengths = {}
    for split, docs in (("train", corpus.train), ("valid", corpus.valid)):
        ids = encode_documents(tok, docs, specials.eos)
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{split}.bin")
        ids.tofile(tmp)
        os.replace(tmp, os.path.join(folder, f"{split}.bin"))
        lengths[split] = int(len(ids))
    atomic_write_json(
        meta_path,
        {
            "fingerprint": fingerprint,
            "dtype": np.dtype(dtype).name,
            "tokens": lengths,
            "corpus": corpus.describe(),
        },
    )
    return open_token_shards(folder, specials)


def open_token_shards(folder: str, specials: SpecialIds) -> TokenData:
    """Returns the token streams already built in ``folder`` (by ``token_shards``) as memmaps; needs no
    corpus text, so processes other than the one that built them never hold it. A DataError names the
    folder when the entry is damaged (meta.json unreadable or not as written, a shard cut short)."""
    meta = load_json(os.path.join(folder, "meta.json"))
    try:
        dtype = np.dtype(meta["dtype"])
        shapes = {split: (int(meta["tokens"][split]),) for split in ("train", "valid")}
        arrays = {
            split: np.memmap(os.path.join(folder, f"{split}.bin"), dtype=dtype, mode="r", shape=shape)
            for split, shape in shapes.items()
        }
        fingerprint = str(meta["fingerprint"])
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise DataError(f"{folder}: damaged token cache entry ({e}); delete it to rebuild it") from None
    return TokenData(
        train=arrays["train"], valid=arrays["valid"], fingerprint=fingerprint, path=folder, specials=specials
    )


class Blocks:
    """Fixed-length samples cut from a token stream, visited in an order reshuffled every epoch.

    Causal LM: blocks of ``seq_len + 1`` tokens with stride ``seq_len`` (inputs and shifted targets).
    Masked LM: ``<s>`` + ``seq_len - 1`` tokens.
    """

    def __init__(
        self, tokens: np.ndarray, seq_len: int, objective: str, bos: int, seed: int, shuffle: bool = True
    ):
        self.tokens, self.seq_len, self.objective, self.bos = tokens, seq_len, objective, bos
        self.stride = seq_len if objective == "clm" else seq_len - 1
        self.n_blocks = (len(tokens) - 1) // self.stride if objective == "clm" else len(tokens) // self.stride
        self.seed, self.shuffle = seed, shuffle
        self._perm: tuple[int, np.ndarray] | None = None

    def _order(self, epoch: int) -> np.ndarray:
        if self._perm is None or self._perm[0] != epoch:
            perm = (
                np.random.default_rng([self.seed, epoch]).permutation(self.n_blocks)
                if self.shuffle
                else np.arange(self.n_blocks)
            )
            self._perm = (epoch, perm)
        return self._perm[1]

    def get(self, start: int, count: int) -> torch.Tensor:
        """Returns samples ``start .. start+count-1`` of the run as a (count, block) int64 tensor."""
        rows = []
        for k in range(start, start + count):
            block = int(self._order(k // self.n_blocks)[k % self.n_blocks])
            span = self.seq_len + 1 if self.objective == "clm" else self.stride
            rows.append(
                np.asarray(self.tokens[block * self.stride : block * self.stride + span], dtype=np.int64)
            )
        out = torch.from_numpy(np.stack(rows))
        if self.objective == "mlm":
            out = torch.cat([torch.full((count, 1), self.bos, dtype=torch.long), out], dim=1)
        return out


def mask_tokens(
    tokens: torch.Tensor,
    mask_id: int,
    special: torch.Tensor,
    replacements: torch.Tensor,
    generator: torch.Generator,
    prob: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (inputs, targets) for RoBERTa masked LM: each token not in ``special`` is chosen with
    ``prob``; chosen tokens become ``mask_id`` (80%), a random id from ``replacements`` (10%) or stay
    (10%). Targets are the original ids at chosen positions and -100 elsewhere."""
    chosen = (torch.rand(tokens.shape, generator=generator) < prob) & ~torch.isin(tokens, special)
    action = torch.rand(tokens.shape, generator=generator)
    random_ids = replacements[torch.randint(len(replacements), tokens.shape, generator=generator)]
    inputs = tokens.clone()
    inputs[chosen & (action < 0.8)] = mask_id
    replace = chosen & (action >= 0.8) & (action < 0.9)
    inputs[replace] = random_ids[replace]
    targets = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, targets


class Batches:
    """The global batch of every step: (inputs, targets) of shape (global_batch, seq_len)."""

    def __init__(
        self,
        tokens: np.ndarray,
        seq_len: int,
        objective: str,
        specials: SpecialIds,
        vocab_size: int,
        seed: int,
        shuffle: bool = True,
    ):
        """``vocab_size`` is the tokenizer's: MLM random replacements are drawn from its non-special ids."""
        self.blocks = Blocks(tokens, seq_len, objective, specials.bos, seed, shuffle)
        if self.blocks.n_blocks < 1:
            raise DataError(
                f"corpus too small: {len(tokens)} tokens do not fill one sequence of {seq_len}; lower "
                "--seq-len or add text"
            )
        if objective == "mlm" and specials.mask is None:
            raise DataError("masked LM needs a tokenizer with a <mask> token")
        self.objective, self.mask_id = objective, specials.mask
        special = sorted(
            {specials.bos, specials.eos, specials.pad}
            | ({specials.mask} if specials.mask is not None else set())
        )
        self.special = torch.tensor(special, dtype=torch.long)
        self.replacements = torch.tensor(sorted(set(range(vocab_size)) - set(special)), dtype=torch.long)

    def get(self, start: int, count: int, mask_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (inputs, targets) for samples ``start .. start+count-1``; ``mask_seed`` fixes MLM masks."""
        block = self.blocks.get(start, count)
        if self.objective == "clm":
            return block[:, :-1], block[:, 1:]
        g = torch.Generator().manual_seed(mask_seed)
        return mask_tokens(block, self.mask_id, self.special, self.replacements, g)
