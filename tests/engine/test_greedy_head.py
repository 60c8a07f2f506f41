"""The int8-screened greedy head: its bound holds, and its tokens are the fp32 argmax's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_generate import PROMPTS, greedy_by_recompute, make_model

from nfeval.engine.fast.greedy_head import GreedyHead, greedy_head, screen_supported
from nfeval.engine.fast.speed import Fast
from nfeval.engine.inference.generate import generate
from nfeval.engine.model.config import ModelConfig
from nfeval.engine.model.model import Transformer

pytestmark = pytest.mark.skipif(
    not screen_supported(torch.zeros(1)), reason="the screen needs fbgemm's quantized CPU kernels"
)


def weights(vocab=1000, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, d, generator=g) * 0.02
    w[::7] *= 5  # rows of very different norms, as trained embeddings have
    return w


def hidden_states(w, seed=1):
    """Rows that stress the bound: ordinary, large, one-signed, and aligned with weight rows' signs
    (the largest possible integer sums in the int8 kernel)."""
    g = torch.Generator().manual_seed(seed)
    d = w.shape[1]
    return [
        torch.randn(16, d, generator=g),
        torch.randn(4, d, generator=g) * 40,
        torch.rand(8, d, generator=g) * 3,
        torch.sign(w[:16]) * 3.0,
        torch.randn(1, d, generator=g),
    ]


def test_screened_logits_stay_within_the_bound():
    w = weights()
    head = GreedyHead(w)
    for h in hidden_states(w):
        blocks, block_max, margin, _ = head.screen(h)
        assert torch.equal(block_max, blocks.amax(2))
        screened = blocks.flatten(1)[:, : len(w)].double()
        exact = h.double() @ w.double().t()
        assert bool(((screened - exact).abs().amax(1) <= margin.double()).all())


def test_the_threshold_keeps_the_argmax_and_passes_fewer_tokens_than_twice_the_margin():
    """The threshold is the screen's best token's fp32 logit less the margin (and the rounding slack),
    never below the screened maximum less twice the margin: the fp32 argmax always passes it, and on
    random weights (a near-flat distribution, the screen's worst case) far fewer tokens do than under
    the screened maximum less twice the margin."""
    w = weights(5000, 64)
    head = GreedyHead(w)
    for h in [*hidden_states(w), torch.randn(32, 64, generator=torch.Generator().manual_seed(3))]:
        blocks, _, margin, threshold = head.screen(h)
        screened = blocks.flatten(1)[:, : len(w)]
        argmax = F.linear(h, w).argmax(-1)
        assert bool((screened.gather(1, argmax[:, None])[:, 0] >= threshold).all())
        assert bool((threshold >= screened.amax(1) - 2 * margin).all())
    h = torch.randn(32, 64, generator=torch.Generator().manual_seed(4))
    blocks, _, margin, threshold = head.screen(h)
    screened = blocks.flatten(1)[:, : len(w)]
    passing = int((screened >= threshold[:, None]).sum())
    under_twice_the_margin = int((screened >= (screened.amax(1) - 2 * margin)[:, None]).sum())
    assert passing < under_twice_the_margin / 2, (passing, under_twice_the_margin)


@pytest.mark.parametrize("vocab", [1000, 64, 97, 5])
def test_tokens_equal_the_fp32_argmax(vocab):
    w = weights(vocab)
    head = GreedyHead(w)
    for h in hidden_states(w):
        assert torch.equal(head(h), F.linear(h, w).argmax(-1))


def test_equal_logits_pick_the_lowest_token_and_nan_falls_back():
    w = weights(200)
    w[3] *= 10
    w[150] = w[3]  # two tokens with the same logit for every hidden state, the best for h
    h = w[3:4] * 100
    assert int(GreedyHead(w)(h)) == 3 == int(F.linear(h, w).argmax(-1))
    nan = torch.full((2, w.shape[1]), float("nan"))
    assert torch.equal(GreedyHead(w)(nan), F.linear(nan, w).argmax(-1))


def test_a_near_tie_in_every_block_is_rescored_without_the_full_product(monkeypatch):
    """Every block passes the screen but only one token in each does: the tokens, not the blocks,
    decide whether the full product is cheaper."""
    w = weights(64 * 50) * 0.1
    w[::64] = w[0] + torch.linspace(0, 1e-4, 50)[:, None] * w[0]  # one near-best token per block
    h = w[:1] * 200

    def no_fallback(self, hidden):
        raise AssertionError("the screen fell back to the full product")

    head = GreedyHead(w)
    _, block_max, _, threshold = head.screen(h)
    assert bool((block_max >= threshold[:, None]).all())  # every block passes
    want = F.linear(h, w).argmax(-1)
    monkeypatch.setattr(GreedyHead, "full_argmax", no_fallback)
    assert torch.equal(head(h), want)


def test_head_is_cached_per_model_and_rebuilt_after_an_update():
    model = make_model()
    first = greedy_head(model)
    assert greedy_head(model) is first
    with torch.no_grad():
        model.tok_emb.weight.mul_(2)
    assert greedy_head(model) is not first
    assert greedy_head(Transformer(model.cfg)) is not greedy_head(model)


def test_generation_through_the_screen_equals_recompute(monkeypatch):
    cfg = ModelConfig(vocab_size=3000, n_layer=2, d_model=32, n_head=4, d_ffn=64, max_seq_len=48)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()

    def no_fallback(self, hidden):
        raise AssertionError("the screen fell back to the full product")

    monkeypatch.setattr(GreedyHead, "full_argmax", no_fallback)
    got = generate(model, PROMPTS, max_new_tokens=10, batch_size=4, speed=Fast())
    monkeypatch.undo()
    assert got == [greedy_by_recompute(model, p, 10) for p in PROMPTS]
