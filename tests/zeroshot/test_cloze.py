"""The held-out corpus cloze task: true continuations, distractors from other documents."""

from __future__ import annotations

import pytest
from conftest import make_text

from nfeval.zeroshot.cloze import build_docs, split_sentences
from nfeval.zeroshot.config import ZeroShotConfig


def documents(n_docs: int = 6) -> list[str]:
    return [" ".join(make_text(12, seed=d)) for d in range(n_docs)]


def test_split_sentences():
    assert split_sentences("One two.  Three four?\nFive six! seven") == [
        "One two.",
        "Three four?",
        "Five six! seven",
    ]


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
        j = next(j for j in range(1, len(sents)) if " ".join(sents[max(0, j - 3) : j]) == doc["context"])
        assert doc["choices"][doc["label"]] == sents[j]
        for k, choice in enumerate(doc["choices"]):
            if k != doc["label"]:
                assert choice not in sents
    assert build_docs(docs_text, n_items=30, seed=1) == docs  # deterministic


def test_too_little_text_is_an_error():
    with pytest.raises(ValueError, match="too small"):
        build_docs(["Only one document here. It has sentences. Three of them. And four."])


def test_corpus_cloze_task_scores_through_lm_eval(tmp_path, tiny_clm_ckpt, monkeypatch):
    from nfeval.zeroshot.cloze import write_jsonl
    from nfeval.zeroshot.evaluate import evaluate

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    docs = build_docs(documents(), n_items=12, seed=0)
    write_jsonl(docs, str(tmp_path / "data" / "corpus_cloze" / "validation.jsonl"))
    out = evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(
            tasks=["corpus_cloze"], data_dir=str(tmp_path / "data"), output=str(tmp_path / "zs.json")
        ),
    )
    result = out["results"]["corpus_cloze"]
    assert 0.0 <= result["acc,none"] <= 1.0 and "acc_per_token,none" in result
    assert out["n-samples"]["corpus_cloze"]["effective"] == 12


def test_corpus_cloze_bad_label_names_file_and_line(tmp_path, tiny_clm_ckpt, monkeypatch):
    from nfeval.zeroshot.cloze import write_jsonl
    from nfeval.zeroshot.evaluate import evaluate

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    docs = build_docs(documents(), n_items=3, seed=0)
    docs[1]["label"] = 7
    path = tmp_path / "data" / "corpus_cloze" / "validation.jsonl"
    write_jsonl(docs, str(path))
    with pytest.raises(ValueError, match=rf"{path}:2: field 'label' = 7 is out of range"):
        evaluate(
            tiny_clm_ckpt,
            ZeroShotConfig(
                tasks=["corpus_cloze"], data_dir=str(tmp_path / "data"), output=str(tmp_path / "zs.json")
            ),
        )
    assert not (tmp_path / "zs.json").exists()
