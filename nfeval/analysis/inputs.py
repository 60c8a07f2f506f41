"""What the analyses read: a model (checkpoint, fairseq file or a preset's initialisation) and batches
of tokens (a text file or the embedded default corpus, tokenized with the model's own tokenizer, a
given one, or a byte-level BPE trained on the corpus).

A model spec is a path (an nfeval run or checkpoint directory, or a fairseq checkpoint file) or
``preset:NAME`` (e.g. ``preset:normformer-small``): that preset's weights at initialisation under
``torch.manual_seed(seed)``, so the same seed gives every architecture the same shared weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer

from ..base.errors import ConfigError, MissingDataError
from ..base.fingerprint import fingerprint_model
from ..engine.checkpoints import checkpoint, loading
from ..engine.fast import cpu_linear
from ..engine.model.config import parse_preset, preset
from ..engine.model.model import Transformer
from ..engine.text.builtin_corpus import default_corpus
from ..engine.text.data import Batches, TokenData, get_tokenizer, load_text_corpus, token_shards
from ..engine.text.tokenization import load_tokenizer

PRESET_PREFIX = "preset:"


@dataclass
class Target:
    """A model to analyse, with the facts every analysis JSON records about it."""

    name: str
    model: Transformer
    tokenizer: Tokenizer | None
    info: dict[str, Any]  # source, architecture, n_layer, fingerprint, seed (for presets)


def check_model_spec(spec: str) -> None:
    """Raises a UserError unless ``spec`` is ``preset:NAME`` with a known preset or an existing path."""
    if spec.startswith(PRESET_PREFIX):
        try:
            parse_preset(spec[len(PRESET_PREFIX) :])
        except ValueError as e:
            raise ConfigError(f"{spec}: {e}") from None
    elif not os.path.exists(spec):
        raise MissingDataError(
            f"{spec}: no such checkpoint (expected an nfeval run/checkpoint directory, a fairseq "
            f"checkpoint file, or {PRESET_PREFIX}NAME such as {PRESET_PREFIX}normformer-small)"
        )


def load_target(
    spec: str,
    seed: int = 1,
    fairseq_head_scale_bug: bool = False,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
) -> Target:
    """Returns the model named by ``spec`` (see the module docstring) in fp32 on CPU, eval mode, with the
    CPU kernel (``cpu_linear.convert``) and its tokenizer (``tokenizer``/``fairseq_dict`` as
    ``checkpoint.load`` takes them; presets have none)."""
    check_model_spec(spec)
    if spec.startswith(PRESET_PREFIX):
        name = spec[len(PRESET_PREFIX) :]
        torch.manual_seed(seed)
        model = Transformer(preset(name)).eval()
        info = {"source": spec, "seed": seed, "fingerprint": fingerprint_model(model)}
        tokenizer = None
    else:
        identity = loading.identify(
            spec,
            fairseq_head_scale_bug=fairseq_head_scale_bug,
            tokenizer=tokenizer,
            fairseq_dict=fairseq_dict,
            allow_hf=False,
        )
        ckpt = checkpoint.materialize(identity.loaded)
        model, tokenizer, name = ckpt.model, ckpt.tokenizer, os.path.basename(os.path.normpath(spec))
        info = {"source": os.path.abspath(spec), "fingerprint": ckpt.fingerprint}
    cfg = model.cfg
    info.update(architecture=cfg.architecture, n_layer=cfg.n_layer, d_model=cfg.d_model)
    return Target(name=name, model=cpu_linear.convert(model.float()), tokenizer=tokenizer, info=info)


def check_data_args(data: str | None, tokenizer: str | None) -> None:
    """Raises MissingDataError if a given data file or tokenizer does not exist."""
    for flag, path in (("--data", data), ("--tokenizer", tokenizer)):
        if path and not os.path.exists(path):
            raise MissingDataError(f"{flag} {path}: file not found")


def token_data(
    data: str | None, tokenizer: str | Tokenizer | None, vocab_size: int
) -> tuple[TokenData, Tokenizer]:
    """Returns (token shards, tokenizer) of ``data`` (a text file/folder; None: the embedded default corpus)
    tokenized by ``tokenizer`` (an object, a path, or None: a BPE of ``vocab_size`` trained on it)."""
    corpus = load_text_corpus(data) if data else default_corpus()
    if tokenizer is None:
        tok = get_tokenizer(None, corpus, vocab_size)
    elif isinstance(tokenizer, str):
        tok = load_tokenizer(tokenizer)
    else:  # a loaded tokenizer (a tokenizers.Tokenizer or a FairseqTokenizer)
        tok = tokenizer
    return token_shards(corpus, tok), tok


def batches(tokens: TokenData, vocab_size: int, seq_len: int, seed: int) -> Batches:
    """Returns the causal-LM batches of the training split, in the seeded order (same for every model)."""
    return Batches(tokens.train, seq_len, "clm", tokens.specials, vocab_size, seed)


def check_vocab(target_name: str, model_vocab: int, tokenizer_vocab: int) -> None:
    """Raises ConfigError if the tokenizer's ids do not fit the model's embedding."""
    if tokenizer_vocab > model_vocab:
        raise ConfigError(
            f"{target_name}: the tokenizer has {tokenizer_vocab} tokens but the model only {model_vocab}; "
            "pass the model's own --tokenizer"
        )
