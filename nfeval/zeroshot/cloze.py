"""A held-out cloze task built from a corpus's own validation text.

Each item: a few consecutive sentences as context; the choices are the true next sentence and
sentences drawn from other documents of the same split. A model that learned the corpus prefers the
true continuation, so the task's accuracy means something even for a model trained for minutes on
a CPU, where the public benchmarks sit at chance.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence

from ..base.artifacts import atomic_write_text
from ..base.errors import ConfigError, DataError

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def split_sentences(text: str) -> list[str]:
    """Returns the sentences of ``text`` (a simple punctuation split; whitespace folded)."""
    text = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(text) if s]


def build_docs(
    documents: Sequence[str],
    n_items: int = 500,
    n_choices: int = 4,
    context_sentences: int = 3,
    min_words: int = 4,
    max_words: int = 40,
    seed: int = 0,
) -> list[dict]:
    """Returns up to ``n_items`` cloze docs ``{context, choices, label}``, deterministic for a seed.

    The context is the up to ``context_sentences`` sentences before the target (at least one).
    Distractors come from other documents, and every choice has ``min_words``..``max_words`` words,
    so length alone gives little away.
    """
    if n_choices < 2:
        raise ConfigError(f"n_choices={n_choices}: expected at least 2")
    rng = random.Random(seed)
    ok = lambda s: min_words <= len(s.split()) <= max_words  # noqa: E731
    per_doc = [split_sentences(d) for d in documents]
    pool = [(i, s) for i, sents in enumerate(per_doc) for s in sents if ok(s)]
    candidates = [(i, j) for i, sents in enumerate(per_doc) for j in range(1, len(sents)) if ok(sents[j])]
    if len({i for i, _ in pool}) < 2 or not candidates:
        raise DataError(
            "the validation text is too small to build a cloze task (need 2+ documents with sentences)"
        )
    rng.shuffle(candidates)
    docs = []
    for i, j in candidates[:n_items]:
        distractors: list[str] = []
        while len(distractors) < n_choices - 1:
            doc_id, sentence = rng.choice(pool)
            if doc_id != i and sentence not in distractors:
                distractors.append(sentence)
        label = rng.randrange(n_choices)
        choices = distractors[:label] + [per_doc[i][j]] + distractors[label:]
        context = per_doc[i][max(0, j - context_sentences) : j]
        docs.append({"context": " ".join(context), "choices": choices, "label": label})
    return docs


def write_jsonl(docs: Sequence[dict], path: str) -> None:
    """Writes ``docs`` as JSONL (one object per line) to ``path``."""
    atomic_write_text(path, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
