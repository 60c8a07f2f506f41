"""The held-out corpus cloze task: true continuations, distractors from other documents."""

from __future__ import annotations

import pytest

from nfeval.cloze import build_docs, split_sentences
from conftest import make_text


def documents(n_docs: int = 6) -> list[str]:
    return [" ".join(make_text(12, seed=d)) for d in range(n_docs)]


def test_split_sentences():
    assert split_sentences("One two.  Three four?\nFive six! seven") == ["One two.", "Three four?", "Five six! seven"]


def test_docs_hold_the_true_next_sentence_and_foreign_distractors():
    docs_text = documents()
    per_doc = [split_sentences(d) for d in docs_text]
    docs = build_docs(docs_text, n_items=30, n_choices=4, context_sentences=3, seed=1)
    assert len(docs) == 30
    labels = {d["label"] for d in docs}
    assert len(labels) > 1  # the gold position is shuffled
    for doc in docs:
        assert len(doc["choices"]) == 4 and len(set(doc["choices"])) == 4
        source = next(i for i, s in enumerate(per_doc) if doc["context"] in " ".join(s))
        sents = per_doc[source]
        j = next(j for j in range(3, len(sents)) if " ".join(sents[j - 3 : j]) == doc["context"])
        assert doc["choices"][doc["label"]] == sents[j]
        for k, choice in enumerate(doc["choices"]):
            if k != doc["label"]:
                assert choice not in sents
    assert build_docs(docs_text, n_items=30, seed=1) == docs  # deterministic


def test_too_little_text_is_an_error():
    with pytest.raises(ValueError, match="too small"):
        build_docs(["Only one document here. It has sentences. Three of them. And four."])
