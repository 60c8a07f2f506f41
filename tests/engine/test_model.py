"""The Transformer against fairseq's layer semantics, written out by hand here as the reference."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from nfeval.engine.model.config import ARCHITECTURES, SIZES, preset
from nfeval.engine.model.model import Block, SelfAttention, SequenceClassifier, Transformer, sinusoidal_table


def tiny(arch: str = "normformer", **kw):
    return preset(f"{arch}-tiny", **kw)


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Gives every parameter (gains, norms, biases included) a random non-trivial value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))


def reference_attention(attn: SelfAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """fairseq MultiheadAttention + the decoder layer's c_attn scaling, written with explicit softmax."""
    cfg = attn.cfg
    B, T, C = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    wq, wk, wv = attn.qkv.weight.split(C, 0)
    bq, bk, bv = attn.qkv.bias.split(C, 0)
    q, k, v = (F.linear(x, w, b).view(B, T, H, hd).transpose(1, 2) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if causal:
        scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    heads = scores.softmax(-1) @ v  # B, H, T, hd
    g = attn.head_gain
    if g is not None and cfg.head_scale_position == "before_out_proj":
        # The paper: HeadScaleMHA = Concat(γ_1 h_1, …, γ_n h_n) W^O
        heads = heads * g.view(1, H, 1, 1)
    out = F.linear(heads.transpose(1, 2).reshape(B, T, C), attn.out_proj.weight, attn.out_proj.bias)
    if g is not None and cfg.head_scale_position == "after_out_proj":
        # fairseq: x.view(t, b, nh, hd); einsum("tbhd,h->tbhd") (or the old buggy "tbhd,h->tbdh"); reshape
        t = out.transpose(0, 1).reshape(T, B, H, hd)
        spec = "tbhd,h->tbdh" if cfg.head_scale_transpose_bug else "tbhd,h->tbhd"
        out = torch.einsum(spec, t, g).reshape(T, B, C).transpose(0, 1)
    return out


def reference_block(block: Block, x: torch.Tensor, cfg) -> torch.Tensor:
    """fairseq TransformerDecoderLayerBase.forward with scale_attn/scale_fc/scale_heads/scale_resids."""
    ln = lambda m, t: F.layer_norm(t, m.normalized_shape, m.weight, m.bias, m.eps)  # noqa: E731
    pre = cfg.norm_position == "pre"
    residual = x
    if pre:
        x = ln(block.attn_norm, x)
    x = reference_attention(block.attn, x, cfg.causal)
    if cfg.scale_attn:
        x = ln(block.attn_out_norm, x)
    x = residual + x
    if not pre:
        x = ln(block.attn_norm, x)
    residual = x
    if pre:
        x = ln(block.ffn_norm, x)
    x = F.linear(x, block.fc1.weight, block.fc1.bias)
    x = F.gelu(x) if cfg.activation == "gelu" else F.relu(x) ** 2
    if cfg.scale_fc:
        x = ln(block.ffn_hidden_norm, x)
    x = F.linear(x, block.fc2.weight, block.fc2.bias)
    if cfg.scale_resids:
        residual = block.resid_gain * residual
    x = residual + x
    if not pre:
        x = ln(block.ffn_norm, x)
    return x


FLAG_COMBOS = list(
    itertools.product(("pre", "post"), (False, True), (False, True), (False, True), (False, True))
)


@pytest.mark.parametrize("norm_position,scale_attn,scale_fc,scale_heads,scale_resids", FLAG_COMBOS)
def test_block_matches_fairseq_reference(norm_position, scale_attn, scale_fc, scale_heads, scale_resids):
    cfg = tiny(
        "prenorm",
        norm_position=norm_position,
        scale_attn=scale_attn,
        scale_fc=scale_fc,
        scale_heads=scale_heads,
        scale_resids=scale_resids,
    )
    block = Block(cfg).eval()
    randomize(block)
    block.double()  # float64 so that only a semantic difference can exceed the tolerance
    x = torch.randn(2, 7, cfg.d_model, dtype=torch.float64)
    torch.testing.assert_close(block(x, None), reference_block(block, x, cfg), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "position,bug", [("after_out_proj", False), ("before_out_proj", False), ("after_out_proj", True)]
)
def test_head_scale_matches_hand_reference(position, bug):
    cfg = tiny(head_scale_position=position, head_scale_transpose_bug=bug)
    attn = SelfAttention(cfg).eval()
    randomize(attn, seed=1)
    attn.double()
    assert not torch.allclose(attn.head_gain, torch.ones_like(attn.head_gain))
    x = torch.randn(3, 5, cfg.d_model, dtype=torch.float64)
    torch.testing.assert_close(attn(x, None), reference_attention(attn, x, causal=True), rtol=1e-9, atol=1e-9)


def test_head_scale_placements_differ():
    """The two placements are different functions (the bias is scaled only after out_proj)."""
    x = torch.randn(2, 4, 64)
    outs = []
    for position in ("after_out_proj", "before_out_proj"):
        torch.manual_seed(0)
        attn = SelfAttention(tiny(head_scale_position=position)).eval()
        randomize(attn, seed=2)
        outs.append(attn(x, None))
    assert not torch.allclose(outs[0], outs[1], atol=1e-4)


def test_normformer_with_ops_off_is_bit_identical_to_prenorm():
    torch.manual_seed(0)
    base = Transformer(tiny("prenorm")).eval()
    nf = Transformer(tiny("normformer", scale_attn=False, scale_fc=False)).eval()
    missing, unexpected = nf.load_state_dict(base.state_dict(), strict=False)
    assert unexpected == [] and all(name.endswith("head_gain") for name in missing) and missing
    idx = torch.randint(0, base.cfg.vocab_size, (2, 16))
    assert torch.equal(base(idx), nf(idx))


@pytest.mark.parametrize("size", list(SIZES))
def test_normformer_parameter_overhead_per_preset(size):
    with torch.device("meta"):
        counts = {arch: Transformer(preset(f"{arch}-{size}")).num_params() for arch in ARCHITECTURES}
    s = SIZES[size]
    L, d, f, h = s["n_layer"], s["d_model"], s["d_ffn"], s["n_head"]
    assert counts["normformer"] - counts["prenorm"] == L * (2 * d + 2 * f + h)
    assert counts["normformer-resscale"] - counts["prenorm"] == L * (2 * d + 2 * f + h) + L * d
    assert counts["postnorm"] == counts["prenorm"] - 2 * d  # Post-LN has no final LayerNorm
    assert preset(f"normformer-{size}").normformer_param_count() == L * (2 * d + 2 * f + h)


def test_125m_preset_size():
    with torch.device("meta"):
        n = Transformer(preset("prenorm-125M", vocab_size=50257)).num_params()
        learned = Transformer(preset("prenorm-125M", vocab_size=50257, positions="learned")).num_params()
    # fairseq's recipe: sinusoidal positions, so GPT-2 small (124.4M) less its 1024 learned positions;
    # with learned positions, GPT-2 small plus 1024 more positions of d=768.
    assert n == 124_439_808 - 1024 * 768
    assert learned == 124_439_808 + 1024 * 768


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_causality(arch, positions):
    torch.manual_seed(0)
    model = Transformer(tiny(arch, positions=positions, scale_embedding=positions == "sinusoidal")).eval()
    randomize(model)
    idx = torch.randint(0, model.cfg.vocab_size, (1, 12))
    base = model(idx)
    for t in range(11):
        changed = idx.clone()
        changed[0, t + 1] = (changed[0, t + 1] + 1) % model.cfg.vocab_size
        out = model(changed)
        assert torch.equal(out[0, : t + 1], base[0, : t + 1]), f"position <= {t} changed"
        assert not torch.allclose(out[0, t + 1], base[0, t + 1])


def test_masked_lm_is_bidirectional_and_ignores_padding():
    torch.manual_seed(0)
    model = Transformer(tiny("normformer", objective="mlm")).eval()
    idx = torch.randint(5, model.cfg.vocab_size, (1, 10))
    changed = idx.clone()
    changed[0, 9] = (idx[0, 9] + 1) % model.cfg.vocab_size
    assert not torch.allclose(model(idx)[0, 0], model(changed)[0, 0])
    # Right padding hidden by the mask does not change the real positions.
    padded = torch.cat([idx, torch.full((1, 4), 1)], dim=1)
    mask = torch.cat([torch.ones(1, 10, dtype=torch.bool), torch.zeros(1, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(padded, mask)[0, :10], model(idx)[0], rtol=1e-5, atol=1e-5)


# the architectures that can be encoders (nGPT is a causal LM only)
ENCODERS = sorted(a for a in ARCHITECTURES if not preset(f"{a}-tiny").ngpt)


@pytest.mark.parametrize("arch", ENCODERS)
def test_classifier_computes_only_the_first_row_of_the_last_layer_exactly(arch):
    """An encoder's classifier runs its last layer at the first position only (keys and values from
    every token): its scores and every gradient equal those of the full last layer's first row. In
    float64: DyT's unnormalised activations make float32's rounding alone (gradient elements of ~0.2
    summed from terms of ~30) exceed the tolerance; in float64 only a real difference can."""
    torch.manual_seed(0)
    qkv_norm = {} if ARCHITECTURES[arch].get("qk_norm") else {"qkv_norm": True}  # the query's own norm too
    model = SequenceClassifier(Transformer(tiny(arch, objective="mlm", **qkv_norm)), 3).eval()
    randomize(model)
    model.double()
    idx = torch.randint(5, model.transformer.cfg.vocab_size, (3, 9))
    mask = torch.arange(9)[None, :] < torch.tensor([[9], [6], [2]])

    def scores_and_grads(scores_of):
        model.zero_grad()
        scores = scores_of()
        scores.square().sum().backward()
        return scores.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    fast, fast_grads = scores_and_grads(lambda: model(idx, mask))
    full, full_grads = scores_and_grads(lambda: model.head(model.transformer.encode(idx, mask)[:, 0]))
    torch.testing.assert_close(fast, full, rtol=1e-5, atol=1e-5)
    assert fast_grads.keys() == full_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    with pytest.raises(ValueError, match="encoder"):
        Transformer(tiny(arch)).encode(idx, last_layer_positions=slice(1))


def test_sinusoidal_positions_follow_fairseq_offset():
    cfg = tiny("prenorm", positions="sinusoidal", pad_token_id=1)
    model = Transformer(cfg)
    d, half = cfg.d_model, cfg.d_model // 2
    freq = math.exp(-math.log(10000) / (half - 1))
    # Token i sits at fairseq position padding_idx + 1 + i.
    for i in (0, 5):
        pos = cfg.pad_token_id + 1 + i
        assert model.sin_pos[i, 0].item() == pytest.approx(math.sin(pos))
        assert model.sin_pos[i, half + 1].item() == pytest.approx(math.cos(pos * freq))
    assert torch.equal(sinusoidal_table(8, d, 1)[1], torch.zeros(d))


def test_loss_ignores_minus_100_and_matches_full_logits():
    torch.manual_seed(0)
    model = Transformer(tiny("normformer")).eval()
    idx = torch.randint(0, model.cfg.vocab_size, (2, 9))
    targets = torch.randint(0, model.cfg.vocab_size, (2, 9))
    targets[0, :4] = -100
    expected = F.cross_entropy(model(idx).view(-1, model.cfg.vocab_size), targets.view(-1), ignore_index=-100)
    torch.testing.assert_close(model.loss(idx, targets), expected)


@pytest.mark.parametrize(
    "position,bug", [("after_out_proj", False), ("before_out_proj", False), ("after_out_proj", True)]
)
def test_fold_head_scale_keeps_logits(position, bug):
    torch.manual_seed(0)
    model = Transformer(tiny("normformer", head_scale_position=position, head_scale_transpose_bug=bug)).eval()
    randomize(model)
    idx = torch.randint(0, model.cfg.vocab_size, (2, 11))
    before = model(idx)
    model.fold_head_scale()
    assert all(b.attn.head_gain is None for b in model.blocks) and not model.cfg.scale_heads
    torch.testing.assert_close(model(idx), before, rtol=1e-5, atol=1e-5)
