"""Prefix-tree packing: the same log-probs and greedy flags as scoring each request alone, on random
nfeval models and a HF GPT-2 built from a config; token-budget batches; the FLOP count."""

from __future__ import annotations

import math
import random

import pytest
import torch
from test_generate import make_model
from test_zeroshot_adapter import build_hf_gpt2, requests_for

from nfeval.engine.inference import vocab_head
from nfeval.engine.inference.backend import matmul_params
from nfeval.engine.inference.vocab_head import VocabProjection
from nfeval.model_adapters import NFEvalLM
from nfeval.model_adapters.config import ScoringConfig
from nfeval.model_adapters.scorer import ModelShape, ScoringStats, pack_rows, plan_batches, score

VOCAB = 97


def multiple_choice_requests(seed: int = 0, max_len: int = 40) -> list[tuple[list[int], list[int]]]:
    """Documents of 2-4 choices over one context (multi- and single-token continuations), contexts that
    are prefixes of others, a duplicate, unshared contexts of ragged lengths and one cut from the left."""
    rng = random.Random(seed)
    toks = lambda n: [rng.randrange(1, VOCAB) for _ in range(n)]  # noqa: E731
    reqs = []
    for _ in range(6):
        ctx = toks(rng.randrange(1, 15))
        for _ in range(rng.randrange(2, 5)):
            reqs.append((ctx, toks(rng.choice([1, 1, 2, 5]))))
    long_ctx = toks(20)
    reqs += [(long_ctx[:8], toks(3)), (long_ctx, toks(2)), (long_ctx, [7]), (long_ctx, [7])]
    reqs += [(toks(n), toks(m)) for n, m in ((1, 1), (3, 9), (25, 4))]
    reqs.append((toks(max_len + 5), toks(3)))  # longer than the window: cut from the left
    rng.shuffle(reqs)
    return reqs


@torch.no_grad()
def reference(model, requests, max_length):
    """Returns (log-prob, greedy) of each request from the model's plain causal forward, one at a time."""
    out = []
    for ctx, cont in requests:
        seq = (ctx + cont)[-(max_length + 1) :]
        logp = model(torch.tensor([seq[:-1]])).log_softmax(-1)[0, -len(cont) :]
        target = torch.tensor(cont)
        out.append(
            (float(logp[torch.arange(len(cont)), target].sum()), bool((logp.argmax(-1) == target).all()))
        )
    return out


def nfeval_features_at(model):
    def features_at(idx, keep, position_ids=None, attn_mask=None):
        hidden = model.encode(idx, position_ids=position_ids, attn_mask=attn_mask)
        return hidden[keep], VocabProjection(model.tok_emb.weight)

    return features_at


@pytest.mark.parametrize("norm,positions", [("pre", "learned"), ("post", "sinusoidal")])
@pytest.mark.parametrize("pack_tokens", [16, 256])
def test_packed_equals_unpacked_and_plain_forward_nfeval(norm, positions, pack_tokens, monkeypatch):
    monkeypatch.setattr(vocab_head, "ROW_CHUNK", 7)  # the head's chunks end inside rows and requests
    monkeypatch.setattr(vocab_head, "VOCAB_TILE", 10)  # and its tiles do not divide the vocabulary
    model = make_model(norm=norm, positions=positions)
    reqs = multiple_choice_requests(max_len=40)
    want = reference(model, reqs, 40)
    stats = {}
    for packed in (True, False):
        stats[packed] = ScoringStats()
        got = score(
            nfeval_features_at(model),
            reqs,
            max_length=40,
            device="cpu",
            packed=packed,
            max_batch_tokens=64,
            pack_tokens=pack_tokens,
            stats=stats[packed],
            progress=False,
        )
        for (ll, g), (ll_ref, g_ref), (_, cont) in zip(got, want, reqs):
            assert abs(ll - ll_ref) <= 1e-5
            assert g == g_ref and ll.n_tokens == len(cont)
    assert stats[True].tokens < stats[False].tokens <= stats[False].input_tokens


def test_greedy_flags_compare_true_and_false():
    model = make_model()
    ctx = [5, 9, 11]
    best = int(model(torch.tensor([ctx])).argmax(-1)[0, -1])
    reqs = [(ctx, [best]), (ctx, [best % (VOCAB - 1) + 1]), (ctx, [best, 3])]
    for packed in (True, False):
        got = score(
            nfeval_features_at(model), reqs, max_length=40, device="cpu", packed=packed, progress=False
        )
        assert [g for _, g in got] == [True, False, reference(model, reqs[2:], 40)[0][1]]


def test_tree_rows_share_prefixes_and_mask_ancestors():
    rows = pack_rows([[1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [9]], pack_tokens=100, packed=True)
    assert len(rows) == 1 and rows[0].tokens == [1, 2, 3, 4, 5, 9]
    assert rows[0].depths == [0, 1, 2, 2, 3, 0]
    assert rows[0].paths == {0: [0, 1, 2], 2: [0, 1, 2], 1: [0, 1, 3, 4], 3: [5]}
    mask = rows[0].ancestor_mask(7)
    assert mask[4].tolist() == [True, True, False, True, True, False, False]
    assert mask[5].tolist() == [False] * 5 + [True, False] and mask[6].tolist() == [False] * 6 + [True]
    assert [r.tokens for r in pack_rows([[1, 2, 3], [1, 2, 4, 5], [1, 2, 3]], 100, packed=False)] == [
        [1, 2, 3], [1, 2, 4, 5]]  # fmt: skip


def test_batches_bounded_by_padded_tokens():
    widths = [900, 10, 300, 800, 5, 3]
    batches = plan_batches(widths, max_batch_tokens=1000)
    assert [[widths[r] for r in b] for b in batches] == [[900], [800], [300, 10, 5], [3]]
    assert all(len(b) * max(widths[r] for r in b) <= 1000 or len(b) == 1 for b in batches)
    assert sorted(r for b in batches for r in b) == list(range(6))
    assert all(len(b) <= 2 for b in plan_batches(widths, 10_000, max_rows=2))


def test_flops_count_weights_attention_and_head():
    model = make_model()
    cfg = model.cfg
    shape = ModelShape(matmul_params(model), cfg.d_model, cfg.n_layer, cfg.vocab_size)
    per_layer = 4 * cfg.d_model**2 + 2 * cfg.d_model * cfg.d_ffn  # qkv, out_proj, fc1, fc2
    assert shape.matmul_params == cfg.n_layer * per_layer
    stats = ScoringStats()
    score(nfeval_features_at(model), [([1, 2], [3, 4])], max_length=40, device="cpu", shape=shape,
          stats=stats,
          progress=False)  # fmt: skip
    # 3 input tokens, 1+2+3 attended pairs, 2 scored positions
    assert stats.flops == 2 * shape.matmul_params * 3 + 4 * 32 * 2 * 6 + 2 * 32 * VOCAB * 2
    assert stats.wall_s > 0 and stats.requests == 1


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return build_hf_gpt2(tmp_path_factory.mktemp("hf_gpt2_packed"))


@pytest.mark.parametrize("hf_forward", ["engine", "transformers"])
def test_hf_gpt2_packed_equals_unpacked(hf_dir, hf_forward):
    settings = {"device": "cpu", "progress": False, "hf_forward": hf_forward}
    packed = NFEvalLM(hf_dir, ScoringConfig(batch_size="auto", max_batch_tokens=64, **settings))
    plain = NFEvalLM(hf_dir, ScoringConfig(batch_size=4, pack=False, **settings))
    assert packed.packed and not plain.packed
    stock = NFEvalLM(hf_dir, ScoringConfig(device="cpu", progress=False, hf_forward="transformers"))
    reqs = [(None, ctx, cont) for ctx, cont in multiple_choice_requests(seed=3, max_len=packed.max_length)]
    want = reference(
        lambda idx: stock.model_backend.model(idx).logits, [r[1:] for r in reqs], packed.max_length
    )
    for lm in (packed, plain):
        for (ll, g), (ll_ref, g_ref) in zip(lm._loglikelihood_tokens(reqs), want):
            assert abs(ll - ll_ref) <= 1e-5 and g == g_ref
    assert packed.scoring_stats.tokens < plain.scoring_stats.tokens


@pytest.mark.parametrize("hf_forward", ["engine", "transformers"])
def test_rolling_loglikelihood_is_unchanged_by_packing(hf_dir, hf_forward):
    from lm_eval.models.huggingface import HFLM

    text = "The cat sat on the mat and the dog ran under the tree. " * 8
    ref = HFLM(pretrained=hf_dir, device="cpu", batch_size=2, dtype="float32")
    ours = NFEvalLM(
        hf_dir, ScoringConfig(device="cpu", batch_size="auto", progress=False, hf_forward=hf_forward)
    )
    assert ours.packed
    req = requests_for([(text,)])
    for r in req:
        r.request_type = "loglikelihood_rolling"
    want = ref.loglikelihood_rolling(req, disable_tqdm=True)
    got = ours.loglikelihood_rolling(req, disable_tqdm=True)
    assert abs(want[0] - got[0]) <= 1e-4


def test_a_model_refusing_the_tree_mask_keeps_the_plain_path(hf_dir):
    lm = NFEvalLM(hf_dir, ScoringConfig(device="cpu", progress=False, hf_forward="transformers"))
    lm.model_backend.model.config._attn_implementation = "eager"  # still reads the additive 4-D mask
    assert lm.model_backend.tree_probe()
    base = lm.model_backend.model.base_model
    forward = base.forward
    base.forward = lambda *a, position_ids=None, **k: forward(*a, **k)  # ignores positions
    assert not lm.model_backend.tree_probe()


def test_nfeval_checkpoint_packed_equals_unpacked_through_the_adapter(tiny_clm_ckpt):
    from test_zeroshot_adapter import PAIRS

    choices = [("The cat sat on the", c) for c in (" mat.", " mat and slept.", " m", " dog")]
    reqs = requests_for(PAIRS + choices)
    packed = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", batch_size="auto", progress=False))
    plain = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", pack=False, progress=False))
    assert packed.packed and not plain.packed
    for (ll, g), (ll_ref, g_ref) in zip(packed.loglikelihood(reqs, True), plain.loglikelihood(reqs, True)):
        assert abs(ll - ll_ref) <= 1e-5 and g == g_ref and ll.n_tokens == ll_ref.n_tokens
    assert packed.scoring_stats.tokens < plain.scoring_stats.tokens


def test_hf_gpt2_with_the_fused_gelu_equals_the_stock_model(hf_dir):
    from transformers import AutoModelForCausalLM
    from transformers.activations import NewGELUActivation

    from nfeval.model_adapters.hf_backend import fuse_tanh_gelu

    stock = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    fused = fuse_tanh_gelu(AutoModelForCausalLM.from_pretrained(hf_dir).eval())
    gelus = lambda m: sum(type(x) is NewGELUActivation for x in m.modules())  # noqa: E731
    assert gelus(stock) > 0 and gelus(fused) == 0
    idx = torch.randint(0, stock.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(fused(idx).logits, stock(idx).logits, rtol=0, atol=1e-5)


def test_the_sigmoid_form_of_the_tanh_gelu_is_as_close_to_float64_as_torchs_kernel():
    from nfeval.model_adapters.hf_backend import SigmoidTanhGELU

    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 3
    x64 = x.double()
    exact = 0.5 * x64 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    kernel_error = (torch.nn.functional.gelu(x, approximate="tanh").double() - exact).abs().max()
    with torch.no_grad():
        ours = SigmoidTanhGELU()(x)
    assert (ours.double() - exact).abs().max() <= max(2 * kernel_error, 1e-6)
    wants_grad = x.clone().requires_grad_()
    SigmoidTanhGELU()(wants_grad).sum().backward()  # with gradients on: the differentiable kernel
    assert wants_grad.grad is not None and torch.isfinite(wants_grad.grad).all()
