"""Stages shared by the composite commands (``nfeval demo``, ``nfeval reproduce``, ``nfeval bakeoff``): the
tokenizer every run of one output folder shares, and the zero-shot data folder (corpus cloze task + the
user's tasks) with the metric each task is judged by; and the check of the corpus flags before both.

Both are resumable: a second call with the same folder returns what the first one wrote.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..base.artifacts import atomic_write_text
from ..base.errors import ConfigError, MissingDataError
from ..engine.text.builtin_corpus import default_corpus
from ..engine.text.data import get_tokenizer, load_text_corpus
from ..tasks.registry import BY_NAME, DEFAULT_TASKS
from ..zeroshot.cloze import build_docs, write_jsonl

CLOZE_TASK = "corpus_cloze"
CLOZE_CHOICES = BY_NAME[CLOZE_TASK].choices  # its record's: the chance rate the leaderboard draws


def check_corpus(train_data: str | None, valid_data: str | None) -> None:
    """Raises a UserError when ``--train-data`` or ``--valid-data`` names nothing, or when only
    ``--valid-data`` is given (the embedded corpus is both or neither)."""
    for flag, path in (("--train-data", train_data), ("--valid-data", valid_data)):
        if path and not os.path.exists(path):
            raise MissingDataError(f"{flag} {path}: no such file or folder")
    if valid_data and not train_data:
        raise ConfigError("--valid-data without --train-data: give both, or neither for the embedded corpus")


def shared_tokenizer(
    out: str, vocab_size: int, train_data: str | None = None, valid_data: str | None = None
) -> str:
    """Trains (once) a BPE of ``vocab_size`` on the training corpus (``train_data``/``valid_data``, text
    files or folders; neither: the embedded default corpus) into ``out/tokenizer.json``; returns that path."""
    path = os.path.join(out, "tokenizer.json")
    if not os.path.isfile(path):
        corpus = load_text_corpus(train_data, valid_data) if train_data else default_corpus()
        tok = get_tokenizer(None, corpus, vocab_size)
        atomic_write_text(path, tok.to_str(pretty=True))
    return path


def zeroshot_data(
    out: str, data_dir: str | None, cloze_items: int, seed: int, log: Callable[[str], None]
) -> tuple[str, list[str]]:
    """Builds ``out/zeroshot_data``: the corpus cloze task's documents (from the default corpus's
    validation split) plus links to the task folders found under ``data_dir``.

    Returns (data dir, tasks to score), the corpus cloze task first.
    """
    folder = os.path.join(out, "zeroshot_data")
    cloze = os.path.join(folder, BY_NAME[CLOZE_TASK].folder, "validation.jsonl")
    if not os.path.isfile(cloze):
        docs = build_docs(default_corpus().valid, n_items=cloze_items, n_choices=CLOZE_CHOICES, seed=seed)
        write_jsonl(docs, cloze)
    tasks = [CLOZE_TASK]
    if not data_dir:
        log("zero-shot: no --data-dir; the five public tasks are skipped (only the corpus cloze task runs)")
        return folder, tasks
    for task in DEFAULT_TASKS:
        name = BY_NAME[task].folder
        src, dst = os.path.join(os.path.abspath(data_dir), name), os.path.join(folder, name)
        if os.path.isdir(src):
            if not os.path.lexists(dst):
                os.symlink(src, dst)
            tasks.append(task)
        elif BY_NAME[task].user_supplied:  # never shipped: where to put it is a folder of the user's
            log(f"zero-shot: {task} skipped. {BY_NAME[task].obtain}")
        else:
            log(f"zero-shot: no {name}/ under {data_dir}; {task} skipped")
    return folder, tasks
