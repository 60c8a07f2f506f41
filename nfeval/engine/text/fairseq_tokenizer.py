"""fairseq's GPT-2-BPE tokenization (BPE ids → ``dict.txt`` indices) as one tokenizer.

A fairseq LM trained on GPT-2 BPE does not index GPT-2's vocabulary directly. fairseq writes each BPE
id as a word ("464 3290 ...", fairseq/data/encoders/gpt2_bpe.py) and looks the words up in the
model's ``dict.txt`` (fairseq/data/dictionary.py): ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, then
the file's symbols in file order; a word the file lacks becomes ``<unk>``. Decoding goes back the same
way. ``FairseqTokenizer`` offers the part of ``tokenizers.Tokenizer``'s interface nfeval uses
(``encode``/``encode_batch``/``decode``/``id_to_token``/``get_vocab``/``get_vocab_size``/``to_str``),
so scoring, generation and analysis use it like any other tokenizer. The scorer prepends ``</s>``, as
fairseq's LM task does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from tokenizers import Tokenizer

from ...base.config_flags import flag_field
from ...base.errors import ConfigError, DataError, MissingDataError
from .tokenization import gpt2_bpe, load_tokenizer

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq Dictionary's own, before dict.txt's symbols
UNK = SPECIALS.index("<unk>")
DICT_FILE = "dict.txt"


@dataclass(frozen=True)
class Encoding:
    """What ``encode`` returns (``tokenizers.Encoding``'s ``ids``, the only field nfeval reads)."""

    ids: list[int]


def read_dictionary(path: str) -> list[str]:
    """Returns the symbols of a fairseq ``dict.txt`` by index (the 4 specials first), as fairseq loads it.

    Lines are ``SYMBOL COUNT`` or ``SYMBOL COUNT #fairseq:overwrite``; an overwriting line gives the
    symbol a new index (the old index keeps its symbol for decoding), a duplicate without it is an error.
    """
    if not os.path.isfile(path):
        raise MissingDataError(f"{path}: fairseq dictionary not found")
    symbols, seen = list(SPECIALS), set(SPECIALS)
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                word, count = line.rstrip().rsplit(" ", 1)
                overwrite = count == "#fairseq:overwrite"
                if overwrite:
                    word, count = word.rsplit(" ", 1)
                int(count)
            except ValueError:
                raise DataError(
                    f"{path}: line {n}: expected 'SYMBOL COUNT [#fairseq:overwrite]', got {line.rstrip()!r}"
                ) from None
            if word in seen and not overwrite:
                raise DataError(
                    f"{path}: line {n}: duplicate symbol {word!r} (fairseq needs '#fairseq:overwrite')"
                )
            seen.add(word)
            symbols.append(word)
    return symbols


class FairseqTokenizer:
    """GPT-2 BPE followed by a fairseq dictionary; ids are the fairseq model's embedding rows."""

    def __init__(self, bpe: Tokenizer, symbols: list[str]):
        self.bpe, self.symbols = bpe, symbols
        self.indices = {s: i for i, s in enumerate(symbols)}  # a later (overwriting) index wins
        self.bpe_to_index = {int(s): i for s, i in self.indices.items() if s.isdigit()}

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        """Returns the fairseq indices of ``text`` (no specials: fairseq adds none here; the scorer
        prepends ``</s>``). ``add_special_tokens`` is accepted for interface compatibility only."""
        return Encoding([self.bpe_to_index.get(i, UNK) for i in self.bpe.encode(text).ids])

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[Encoding]:
        """Returns ``encode`` of each text."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Returns the text of fairseq indices; ``<s>``/``<pad>``/``</s>`` are dropped when skipping
        specials, other non-BPE symbols (``<unk>``, ``madeupword0000``) appear as written."""
        pieces: list[str] = []
        run: list[int] = []  # consecutive BPE ids, decoded together (a character can span ids)
        for i in ids:
            symbol = self.symbols[i] if 0 <= i < len(self.symbols) else SPECIALS[UNK]
            if symbol.isdigit():
                run.append(int(symbol))
                continue
            if run:
                pieces.append(self.bpe.decode(run))
                run = []
            if not (skip_special_tokens and symbol in SPECIALS[:3]):
                pieces.append(symbol)
        if run:
            pieces.append(self.bpe.decode(run))
        return "".join(pieces)

    def id_to_token(self, token_id: int) -> str | None:
        """Returns the dict.txt symbol at ``token_id`` (None past the end)."""
        return self.symbols[token_id] if 0 <= token_id < len(self.symbols) else None

    def token_to_id(self, token: str) -> int | None:
        """Returns the index of dict.txt symbol ``token`` (None if it has none)."""
        return self.indices.get(token)

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        """Returns symbol → index."""
        return dict(self.indices)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """Returns the number of dictionary entries (specials included)."""
        return len(self.symbols)

    def to_str(self, pretty: bool = False) -> str:
        """Returns a JSON description (BPE and symbols) that identifies this tokenization."""
        data = {"type": "fairseq-gpt2-bpe", "bpe": json.loads(self.bpe.to_str()), "symbols": self.symbols}
        return json.dumps(data, indent=2 if pretty else None)


def load_bpe(path: str) -> Tokenizer:
    """Returns the BPE behind a dict.txt: GPT-2's folder (encoder.json + vocab.bpe, no added tokens, as
    fairseq's encoder), or a tokenizer.json whose ids are the ones dict.txt lists."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "encoder.json")):
        return gpt2_bpe(path)
    return load_tokenizer(path)


def dictionary_path(ckpt_file: str, fairseq_dict: str | None) -> str | None:
    """Returns ``--fairseq-dict`` (checked to exist), else the dict.txt beside ``ckpt_file``, else None."""
    if fairseq_dict is not None:
        if not os.path.isfile(fairseq_dict):
            raise MissingDataError(f"--fairseq-dict {fairseq_dict}: file not found")
        return fairseq_dict
    beside = os.path.join(os.path.dirname(os.path.abspath(ckpt_file)), DICT_FILE)
    return beside if os.path.isfile(beside) else None


def load_fairseq_tokenizer(dict_path: str, bpe_path: str | None, vocab_size: int) -> FairseqTokenizer:
    """Returns the tokenizer of a fairseq LM from its dict.txt and BPE files (``--tokenizer``); raises
    ConfigError when the BPE is missing or the dictionary has more entries than the model has rows."""
    if bpe_path is None:
        raise ConfigError(
            f"{dict_path}: a fairseq dictionary needs its BPE: pass --tokenizer DIR "
            "(GPT-2's encoder.json + vocab.bpe, e.g. shared/data/tokenizer/gpt2)"
        )
    if not os.path.exists(bpe_path):
        raise MissingDataError(f"--tokenizer {bpe_path}: not found")
    symbols = read_dictionary(dict_path)
    if len(symbols) > vocab_size:
        raise ConfigError(
            f"{dict_path}: {len(symbols)} entries (4 specials + {len(symbols) - 4} lines) but the model "
            f"has {vocab_size} embedding rows: not this model's dictionary"
        )
    return FairseqTokenizer(load_bpe(bpe_path), symbols)


HEAD_SCALE_BUG_HELP = (
    "reproduce the HeadScale einsum of fairseq before 2021-11-03 (for checkpoints trained with it)"
)


@dataclass(frozen=True)
class FairseqReading:
    """How a fairseq checkpoint file is read: ``tokenizer`` (tokenizer.json, or GPT-2's BPE folder mapped
    through ``fairseq_dict``, the dict.txt beside the file when None) and ``fairseq_head_scale_bug`` (the
    HeadScale einsum of fairseq before 2021-11-03). Its fields are the flags of every command that reads
    a checkpoint (``base.config_flags``)."""

    tokenizer: str | None = flag_field(
        None,
        "tokenizer.json, or GPT-2's BPE folder (encoder.json + vocab.bpe) for a fairseq checkpoint with a "
        "dict.txt (default: the checkpoint's tokenizer.json)",
    )
    fairseq_dict: str | None = flag_field(
        None, "fairseq dict.txt of a .pt checkpoint (default: dict.txt beside it)", metavar="FILE"
    )
    fairseq_head_scale_bug: bool = flag_field(False, HEAD_SCALE_BUG_HELP, action="store_true")
