"""The tiled vocabulary head equals log_softmax + gather + argmax on the full logits: ties (the first
maximal index wins, across tiles and within one), vocabularies that the tile does not divide, rows in
several chunks, rows scored for several targets, a bias and features that are logits already."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nfeval.engine.inference import vocab_head
from nfeval.engine.inference.vocab_head import VocabProjection, target_log_probs


def reference(logits: torch.Tensor, at: torch.Tensor, target: torch.Tensor):
    """Returns (log-prob of target, 1 where target is not the first maximal index) from full logits."""
    log_probs = logits.log_softmax(-1)[at, target]
    return log_probs, (logits.argmax(-1)[at] != target).to(torch.int64)


def tied_problem(n: int, vocab: int, d: int = 12, seed: int = 0):
    """Returns (features, weight, at, target): small integers, so every logit is exact in fp32 whatever
    the summation order and the maxima tie often; targets include each row's first and a later
    maximal index, and random tokens; some rows are scored twice, some not at all."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randint(-2, 3, (n, d), generator=gen).float()
    weight = torch.randint(-2, 3, (vocab, d), generator=gen).float()
    logits = features @ weight.T
    is_max = logits == logits.amax(1, keepdim=True)
    first = is_max.float().argmax(1)
    last = vocab - 1 - is_max.flip(1).float().argmax(1)
    rows = torch.arange(n)
    at = torch.cat([rows, rows, rows[::3]])
    target = torch.cat([first, last, torch.randint(0, vocab, (len(rows[::3]),), generator=gen)])
    assert bool((last != first).any())  # some rows tie
    return features, weight, at, target


@pytest.mark.parametrize(
    "rows,tile,n,vocab", [(5, 7, 23, 50), (4, 16, 9, 64), (1024, 256, 1100, 1000), (3, 1000, 10, 97)]
)
def test_tiled_head_equals_log_softmax_and_argmax(rows, tile, n, vocab, monkeypatch):
    monkeypatch.setattr(vocab_head, "ROW_CHUNK", rows)
    monkeypatch.setattr(vocab_head, "VOCAB_TILE", tile)
    features, weight, at, target = tied_problem(n, vocab)
    want_lp, want_wrong = reference(features @ weight.T, at, target)
    got_lp, got_wrong = target_log_probs(features, VocabProjection(weight), at, target)
    assert got_lp.dtype == torch.float32 and got_wrong.dtype == torch.int64
    assert torch.equal(got_wrong, want_wrong)
    assert 0 < int(want_wrong.eq(0).sum()) < len(at)  # both flags occur
    torch.testing.assert_close(got_lp, want_lp, rtol=0, atol=1e-5)


def test_random_logits_bias_and_given_logits(monkeypatch):
    monkeypatch.setattr(vocab_head, "ROW_CHUNK", 6)
    monkeypatch.setattr(vocab_head, "VOCAB_TILE", 9)
    gen = torch.Generator().manual_seed(1)
    features, weight = torch.randn(20, 16, generator=gen) * 3, torch.randn(101, 16, generator=gen)
    bias = torch.randn(101, generator=gen)
    logits = F.linear(features, weight, bias)
    at = torch.tensor([0, 19, 7, 7, 3, 12])
    target = torch.cat([logits.argmax(1)[at[:3]], torch.tensor([0, 100, 50])])
    want_lp, want_wrong = reference(logits, at, target)
    for given, projection in ((features, VocabProjection(weight, bias)), (logits, VocabProjection(None))):
        got_lp, got_wrong = target_log_probs(given, projection, at, target)
        assert torch.equal(got_wrong, want_wrong) and want_wrong.tolist() == [0, 0, 0, 1, 1, 1]
        torch.testing.assert_close(got_lp, want_lp, rtol=0, atol=1e-5)
    assert torch.equal(logits, F.linear(features, weight, bias))  # the given logits were not changed


def test_projection_of_a_linear_layer_only():
    linear = torch.nn.Linear(4, 9, bias=False)
    projection = VocabProjection.of(linear)
    assert projection.weight is linear.weight and projection.bias is None
    x = torch.randn(3, 4)
    torch.testing.assert_close(projection(x), linear(x))
    assert VocabProjection.of(torch.nn.Embedding(9, 4)) is None and VocabProjection.of(None) is None
