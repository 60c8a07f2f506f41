"""What a run's input paths hold, as fingerprints, so that a finished-run key or a resume compares the
text and tokenizer a run read, not where they lay: a run folder, or its data, moved or copied to another
path or machine is the same run.

The fingerprints are the ones runs already record: the corpus fingerprint of ``data.load_text_corpus``
(config.json ``train.data.corpus.fingerprint``) and ``fingerprint_tokenizer`` (of the tokenizer at
``tokenizer``; a run folder holds the one it trained with, ``tokenizer.json``). A corpus fingerprint is
cached in ``$NFEVAL_CACHE`` under the path, size and times of every file it was read from, so a rerun
over unchanged files reads none of them; files moved, copied or rewritten are read once (as the start of
a training run reads them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from typing import Any

from tokenizers import Tokenizer

from ...base.artifacts import atomic_write_text, cache_dir
from ...base.errors import OutputError
from ...base.fingerprint import fingerprint_tokenizer
from ...base.jsonio import load_json
from ..checkpoints import rundir
from ..text.data import load_text_corpus
from ..text.tokenization import load_tokenizer
from .train_config import TrainConfig

# The TrainConfig fields that name input files: keyed by what they hold (``input_fingerprints``).
INPUT_PATH_FIELDS = ("train_data", "valid_data", "tokenizer")
FINGERPRINTED_AS = {"train_data": "corpus", "valid_data": "corpus", "tokenizer": "tokenizer"}


def input_fingerprints(cfg: TrainConfig) -> dict[str, str | None]:
    """Returns {"corpus", "tokenizer"}: the fingerprints of the text at ``train_data`` (+ ``valid_data``)
    and of the tokenizer at ``tokenizer``; None where ``cfg`` names no file (the default corpus, a
    dataset by name, a BPE trained on the corpus: their other fields decide them)."""
    corpus = corpus_fingerprint(cfg.train_data, cfg.valid_data) if cfg.train_data else None
    tokenizer = fingerprint_tokenizer(load_tokenizer(cfg.tokenizer)) if cfg.tokenizer else None
    return {"corpus": corpus, "tokenizer": tokenizer}


def _file_stats(path: str) -> list[list]:
    """Returns [path, size, mtime, ctime] of ``path``, or of every file under it: a change to any shows."""
    paths = (
        [path]
        if not os.path.isdir(path)
        else sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files)
    )
    stats = [(p, os.stat(p)) for p in map(os.path.abspath, paths)]
    return [[p, st.st_size, st.st_mtime_ns, st.st_ctime_ns] for p, st in stats]


def corpus_fingerprint(train_data: str, valid_data: str | None) -> str:
    """Returns ``load_text_corpus(train_data, valid_data).fingerprint``, cached under the files' stats."""
    stats = [_file_stats(p) for p in (train_data, valid_data) if p and os.path.exists(p)]
    name = hashlib.sha256(json.dumps([valid_data is not None, stats]).encode()).hexdigest()[:32]
    cached = cache_dir("corpus_fingerprints", f"{name}.txt")
    if os.path.isfile(cached):
        with open(cached, encoding="utf-8") as f:
            return f.read().strip()
    fingerprint = load_text_corpus(train_data, valid_data).fingerprint
    with contextlib.suppress(OutputError):  # a cache that cannot be written (a read-only home) keeps nothing
        atomic_write_text(cached, fingerprint)
    return fingerprint


def recorded_input_fingerprints(run_dir: str) -> dict[str, str | None] | None:
    """Returns ``input_fingerprints`` of the inputs the run at ``run_dir`` read, from what it recorded
    (config.json's corpus block, its tokenizer.json); None when it recorded no config, or not those."""
    config_path = os.path.join(run_dir, rundir.CONFIG)
    if not os.path.isfile(config_path):
        return None
    train = load_json(config_path).get("train") or {}
    saved = train.get("config") or {}
    corpus = ((train.get("data") or {}).get("corpus") or {}).get("fingerprint")
    tokenizer_path = os.path.join(run_dir, rundir.TOKENIZER)
    if (saved.get("train_data") and corpus is None) or (
        saved.get("tokenizer") and not os.path.isfile(tokenizer_path)
    ):
        return None
    tokenizer = fingerprint_tokenizer(Tokenizer.from_file(tokenizer_path)) if saved.get("tokenizer") else None
    return {"corpus": corpus if saved.get("train_data") else None, "tokenizer": tokenizer}


def unchanged_inputs(saved: TrainConfig, run_dir: str, paths: dict[str, Any]) -> dict[str, Any]:
    """Returns the entries of ``paths`` (input fields of ``saved``, the config of the run at ``run_dir``,
    at new paths) whose files hold what the run read: the same text or tokenizer, moved or copied."""
    recorded = recorded_input_fingerprints(run_dir)
    if recorded is None:
        return {}
    now = input_fingerprints(dataclasses.replace(saved, **paths))
    return {n: p for n, p in paths.items() if now[FINGERPRINTED_AS[n]] == recorded[FINGERPRINTED_AS[n]]}
