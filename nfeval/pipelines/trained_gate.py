"""The trained-run gate of ``reproduce`` and ``bakeoff``: a run whose final validation perplexity does not
beat its corpus's unigram perplexity by ``FACTOR`` did not train, and no claim is read from it.

The unigram perplexity is that of the validation split under the run's tokenizer's token frequencies
counted on the training split, with add-one (Laplace) smoothing over the tokenizer's vocabulary, so a
token unseen in training still has a probability: p(t) = (count(t) + 1) / (N + V), and the perplexity is
exp of the mean −log p over the validation tokens (every token of the stream, EOS included, the tokens a
causal LM predicts). It is read from the token shards the runs train on (``engine.text.data``), built
only if they are not in the cache yet.

Paired tests drop the pairs in which either run did not train (``gated_decide``); a claim left with
fewer than ``MIN_PAIRS`` pairs that way is ``NOT_READABLE``, never "worse".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from ..engine.text.data import open_token_shards
from ..engine.text.tokenization import special_ids
from ..engine.training import recipe
from ..engine.training.run_inputs import build_inputs
from ..engine.training.train_config import TrainConfig
from ..report import verdict
from ..tune.results import tried
from .perplexity import judged_ppl

# A run must end below unigram ÷ FACTOR. A model that learned nothing past token frequencies sits at the
# unigram PPL. On the committed small reports' corpus (the shared natural text, its 2048-token BPE) the
# unigram PPL is 677: collapsed runs end at 742–750 (above it), a Post-LN run that barely trained at 599
# (1.13× below it), and trained runs at 110–230 (2.9–6.2× below; the lowest-LR tune point that trained
# at all, Mix-LN's, at 344: 2.0×). 1.5 (threshold 451 there) lies in the empty gap between the two
# groups, clear of both: it does not pass a run that only learned frequencies, nor fail one that
# learned some context.
FACTOR = 1.5
MIN_PAIRS = 2  # a paired claim needs two pairs whose runs both trained to be read at all
NOT_READABLE = "not readable: did not train"


def unigram_ppl(train: np.ndarray, valid: np.ndarray, vocab_size: int) -> float:
    """Returns the perplexity of the token stream ``valid`` under the add-one-smoothed unigram model
    counted on ``train`` over ``vocab_size`` token ids (see the module docstring)."""
    counts = np.bincount(np.asarray(train, dtype=np.int64), minlength=vocab_size).astype(np.float64)
    log_p = np.log(counts + 1.0) - math.log(len(train) + len(counts))
    return float(math.exp(-log_p[np.asarray(valid, dtype=np.int64)].mean()))


def corpus_unigram_ppl(cfg: TrainConfig) -> float:
    """Returns the unigram perplexity of the corpus and tokenizer of ``cfg`` (a run's TrainConfig), read
    from its token shards (built into the cache first if they are not there)."""
    _, tok_json, folder = build_inputs(cfg)
    tok = Tokenizer.from_str(tok_json)
    data = open_token_shards(folder, special_ids(tok))
    return unigram_ppl(data.train, data.valid, tok.get_vocab_size())


def threshold(unigram: float) -> float:
    """Returns the validation PPL a run must end below to count as trained."""
    return unigram / FACTOR


def trained(record: dict[str, Any], unigram: float) -> bool:
    """Returns whether the run of ``record`` (``pipelines.runs.ensure_run``'s) trained: it finished and
    its final PPL (``perplexity.judged_ppl``) is below ``threshold(unigram)`` (a diverged run did not)."""
    ppl = judged_ppl(record)
    return record.get("status") == "finished" and ppl is not None and ppl < threshold(unigram)


def mark(record: dict[str, Any], unigram: float | None) -> dict[str, Any]:
    """Returns ``record`` with ``trained`` (``trained``'s answer), or as it is when ``unigram`` is None."""
    return record if unigram is None else {**record, "trained": trained(record, unigram)}


def is_trained(record: dict[str, Any]) -> bool:
    """Returns a marked record's ``trained``; a record read without the gate counts as trained when it
    finished (the reading before the gate existed)."""
    return record.get("trained", record.get("status") == "finished")


def recipe_words(records: Iterable[dict[str, Any]]) -> str:
    """Returns the clipping and warm-up of the first of ``records`` that records its recipe, in words
    (``recipe.stability_text``: what a verdict on a run that did not train is read under); "" if none."""
    known = [r["recipe"] for r in records if r.get("recipe")]
    return recipe.stability_text(known[0]) if known else ""


def gate_text(unigram: float, factor: float) -> str:
    """Returns the report header's sentence on the gate (``factor``: the one the report was made with)."""
    return (
        f"**Trained-run gate:** the corpus's unigram perplexity is {unigram:.2f} (token frequencies of the "
        "training split under the runs' tokenizer, add-one smoothed, on the validation split); a run whose "
        f"final validation PPL is not below it ÷ {factor:g} = {unigram / factor:.2f} did not train, and no "
        f"claim is read from it: paired tests drop its pairs, and a claim left with fewer than {MIN_PAIRS} "
        f"pairs is *{NOT_READABLE}*."
    )


def gated_decide(diffs: list[float], dropped: int, recipe_words: str, **decide_kwargs: Any) -> dict[str, Any]:
    """Returns ``verdict.decide(diffs, **decide_kwargs)`` over the pairs whose runs both trained, read
    through ``gate_claim`` (``dropped``: the pairs left out because a run did not train)."""
    return gate_claim(verdict.decide(diffs, **decide_kwargs), dropped, recipe_words)


def gate_claim(decided: dict[str, Any], dropped: int, recipe_words: str) -> dict[str, Any]:
    """Returns a claim decided over the pairs whose runs both trained (``decided``: it, or
    ``verdict.decide``'s fields), saying how many (``dropped``) were left out; ``NOT_READABLE`` (no p,
    so no adjustment changes it) when that left fewer than ``MIN_PAIRS``. ``recipe_words``
    (``recipe_words``) names the recipe they did not train under."""
    if not dropped:
        return decided
    n = decided["n"]
    if n < MIN_PAIRS:
        why = (
            f"{dropped} of {dropped + n} pair(s) had a run that did not train under this recipe "
            f"({recipe_words}); {n} left"
        )
        no_data = verdict.decide([], margin=decided.get("margin"))
        return {**decided, **no_data, "n": n, "verdict": NOT_READABLE, "why": why}
    return {
        **decided,
        "why": f"{decided['why']}; {dropped} pair(s) left out: a run did not train ({recipe_words})",
    }


def failed_lrs(entry: dict[str, Any], unigram: float) -> list[float]:
    """Returns the LRs of one preset's tune (``entry``: tune.json's ``presets[preset]``) whose mean final
    PPL did not end below the gate's threshold (a diverged or incomplete LR included; one that ran on no
    seed yet, such as a band neighbour still to train, is not a failure), ascending."""
    rows = [r for r in entry["per_lr"].values() if "status" not in r or tried(r)]
    return sorted(r["lr"] for r in rows if r.get("val_ppl") is None or not r["val_ppl"] < threshold(unigram))


def best_trained(entry: dict[str, Any], unigram: float | None) -> bool:
    """Returns whether a tune's best LR trained: its mean final PPL (``entry``: tune.json's
    ``presets[preset]``) lies below ``threshold(unigram)``; True when the unigram PPL is not known."""
    best = entry.get("best_val_ppl")
    return unigram is None or (best is not None and best < threshold(unigram))
