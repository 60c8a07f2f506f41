"""Tokenizers: byte-level BPE trained with HF ``tokenizers``, or GPT-2's own files.

Trained tokenizers put fairseq's special tokens first (``<s>``=0, ``<pad>``=1, ``</s>``=2,
``<unk>``=3, ``<mask>``=4) so that the padding index matches fairseq's. GPT-2 files keep GPT-2's ids
(``<|endoftext|>``=50256 as both BOS and EOS) and get ``<pad>`` and ``<mask>`` appended.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ...base.errors import ConfigError, DataError, MissingDataError

FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
GPT2_EOT = "<|endoftext|>"
MIN_BPE_VOCAB = 256 + len(FAIRSEQ_SPECIALS)  # a byte-level BPE holds every byte plus the specials


@dataclass(frozen=True)
class SpecialIds:
    bos: int
    eos: int
    pad: int
    mask: int | None


def _byte_level(tok: Tokenizer) -> Tokenizer:
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Returns a byte-level BPE tokenizer trained on ``texts`` with fairseq's specials first.

    ``vocab_size`` below ``MIN_BPE_VOCAB`` raises ConfigError (the trainer would silently exceed it).
    """
    if vocab_size < MIN_BPE_VOCAB:
        raise ConfigError(
            f"vocab_size={vocab_size}: expected at least {MIN_BPE_VOCAB} "
            f"(256 bytes + {len(FAIRSEQ_SPECIALS)} special tokens) for a byte-level BPE"
        )
    tok = _byte_level(Tokenizer(models.BPE(unk_token=None)))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=FAIRSEQ_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def gpt2_bpe(directory: str) -> Tokenizer:
    """Returns GPT-2's byte-level BPE from ``encoder.json`` + ``vocab.bpe`` in ``directory``, no added tokens
    (as fairseq's GPT-2 encoder, which splits ``<|endoftext|>`` like any text)."""
    enc, bpe = os.path.join(directory, "encoder.json"), os.path.join(directory, "vocab.bpe")
    for path in (enc, bpe):
        if not os.path.isfile(path):
            raise MissingDataError(f"{path}: not found (a GPT-2 tokenizer needs encoder.json and vocab.bpe)")
    return _byte_level(Tokenizer(models.BPE.from_file(enc, bpe)))


def gpt2_tokenizer(directory: str) -> Tokenizer:
    """Returns GPT-2's tokenizer from ``encoder.json`` + ``vocab.bpe`` in ``directory``, plus <pad>/<mask>."""
    tok = gpt2_bpe(directory)
    tok.add_special_tokens([GPT2_EOT, "<pad>", "<mask>"])
    return tok


def load_tokenizer(path: str) -> Tokenizer:
    """Returns the tokenizer at ``path``: a tokenizer.json, or a directory holding one or GPT-2's files."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "tokenizer.json")):
            path = os.path.join(path, "tokenizer.json")
        elif os.path.isfile(os.path.join(path, "encoder.json")):
            return gpt2_tokenizer(path)
        else:
            raise MissingDataError(f"{path}: no tokenizer.json, nor GPT-2's encoder.json + vocab.bpe")
    try:
        return Tokenizer.from_file(path)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: tokenizer file not found") from None
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise DataError(f"{path}: not a valid tokenizer.json ({e})") from None


def special_ids(tok: Tokenizer) -> SpecialIds:
    """Returns BOS/EOS/PAD/MASK ids of a fairseq-style or GPT-2-style tokenizer."""

    def first(*names: str) -> int | None:  # token_to_id, not get_vocab: no 50k-entry dict built
        return next((i for i in map(tok.token_to_id, names) if i is not None), None)

    bos, eos, pad = first("<s>", GPT2_EOT), first("</s>", GPT2_EOT), first("<pad>")
    if bos is None or eos is None or pad is None:
        raise DataError(
            "tokenizer has no BOS/EOS/PAD token: expected <s>, </s>, <pad> or GPT-2's <|endoftext|>"
        )
    return SpecialIds(bos=bos, eos=eos, pad=pad, mask=first("<mask>"))
