"""What a run trains on: its data (built once, by rank 0) and its model config."""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer

from ...base.errors import ConfigError
from ..model.config import ModelConfig, preset
from ..text.builtin_corpus import default_corpus
from ..text.data import get_tokenizer, load_hf_corpus, load_text_corpus, open_token_shards, token_shards
from ..text.tokenization import special_ids
from .parallel import Strategy
from .train_config import TrainConfig


def build_inputs(cfg: TrainConfig) -> tuple[dict, str, str]:
    """Reads ``cfg``'s corpus and builds its tokenizer and token shards into the cache unless there;
    returns (corpus description, tokenizer JSON, shards folder)."""
    if cfg.train_data:
        corpus = load_text_corpus(cfg.train_data, cfg.valid_data)
    elif cfg.hf_dataset:
        corpus = load_hf_corpus(cfg.hf_dataset, cfg.hf_config, cfg.text_column)
    else:
        corpus = default_corpus()
    tok = get_tokenizer(cfg.tokenizer, corpus, cfg.vocab_size or preset(cfg.preset).vocab_size)
    return corpus.describe(), tok.to_str(), token_shards(corpus, tok).path


def inputs_key(cfg: TrainConfig) -> tuple:
    """Returns what ``build_inputs`` reads and builds from: configs with one key share a corpus, a
    tokenizer and token shards."""
    fields = (cfg.train_data, cfg.valid_data, cfg.hf_dataset, cfg.hf_config, cfg.text_column, cfg.tokenizer)
    return (*fields, cfg.vocab_size or preset(cfg.preset).vocab_size)


def load_data(cfg: TrainConfig, par: Strategy) -> tuple[dict, Any, Tokenizer]:
    """Returns (corpus description, token shards, tokenizer). Rank 0 reads the corpus and builds the
    tokenizer and shards; every process then opens the shards, so none keeps the corpus text."""
    corpus_info, tok_json, folder = par.from_main(lambda: build_inputs(cfg))
    tok = Tokenizer.from_str(tok_json)
    return corpus_info, open_token_shards(folder, special_ids(tok)), tok


def model_config(cfg: TrainConfig, tok_vocab: int, pad_id: int) -> ModelConfig:
    """Returns the model config: the preset, the tokenizer's vocab (rounded up to 64), pad id, overrides."""
    fields = {"vocab_size": -(-tok_vocab // 64) * 64, "pad_token_id": pad_id}
    if cfg.objective:
        fields["objective"] = cfg.objective
    fields.update(cfg.model)
    mcfg = preset(cfg.preset, **fields)
    if mcfg.vocab_size < tok_vocab:
        raise ConfigError(
            f"model vocab_size={mcfg.vocab_size} is smaller than the tokenizer's {tok_vocab} tokens"
        )
    return mcfg
