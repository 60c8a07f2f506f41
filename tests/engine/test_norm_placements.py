"""Norm placements (pre, post, sandwich, olmo2, deepnorm), the norm kind and QK-norm, against references.

The reference forward is written here from the formulas with functional ops on the module's own weights;
Gemma 2's and OLMo 2's decoder layers from transformers are a second, independent reference.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from test_generate import PROMPTS, greedy_by_recompute
from torch import nn

from nfeval.engine.fast.speed import Fast
from nfeval.engine.inference.generate import generate
from nfeval.engine.model.config import ARCHITECTURES, NORM_POSITIONS, NORMS, PLACEMENTS, ModelConfig, preset
from nfeval.engine.model.kv_cache import KVCache
from nfeval.engine.model.model import Block, Transformer
from nfeval.engine.model.norms import DynamicErf, DynamicTanh, deepnorm_alpha_beta, make_norm


def randomize(model: nn.Module, seed: int = 0) -> None:
    """Gives every parameter (gains, norms, biases included) a random non-trivial value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))


def norm_ref(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LayerNorm (x - mean) / sqrt(var + eps) · w + b, RMSNorm x / sqrt(mean(x²) + eps) · w, DyT
    (Zhu et al. 2025) tanh(α·x) · γ + β with its one scalar α, or Derf (Chen et al. 2025)
    erf(α·x + s) · γ + β with its scalars α and s."""
    if isinstance(m, DynamicErf):
        assert m.alpha.shape == m.shift.shape == (1,)
        y = torch.erf(m.alpha[0] * x + m.shift[0])
        return y if m.weight is None else y * m.weight + m.bias
    if isinstance(m, DynamicTanh):
        assert m.alpha.shape == (1,)
        y = torch.tanh(m.alpha[0] * x)
        return y if m.weight is None else y * m.weight + m.bias
    if isinstance(m, nn.RMSNorm):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m.eps)
        return y if m.weight is None else y * m.weight
    assert isinstance(m, nn.LayerNorm)
    mean = x.mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt((x - mean).pow(2).mean(-1, keepdim=True) + m.eps)
    return y if m.weight is None else y * m.weight + m.bias


def act_ref(cfg, x: torch.Tensor) -> torch.Tensor:
    if cfg.activation == "gelu":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    return F.relu(x) ** 2


def reference_attention(attn, x: torch.Tensor, cfg) -> torch.Tensor:
    """Causal multi-head attention with explicit softmax, the q/k/v and per-head q/k norms, HeadScale."""
    B, T, C = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    q, k, v = (F.linear(x, w, b) for w, b in zip(attn.qkv.weight.split(C), attn.qkv.bias.split(C)))
    if cfg.qkv_norm:
        q, k, v = norm_ref(attn.query_norm, q), norm_ref(attn.key_norm, k), norm_ref(attn.value_norm, v)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    if cfg.qk_norm:  # each head's vector of head_dim, one gain shared by the heads
        q, k = norm_ref(attn.q_head_norm, q), norm_ref(attn.k_head_norm, k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    heads = scores.softmax(-1) @ v  # B, H, T, hd
    g = attn.head_gain
    if cfg.scale_heads and cfg.head_scale_position == "before_out_proj":
        heads = heads * g.view(1, H, 1, 1)  # the paper: Concat(γ_1 h_1, …, γ_n h_n) W^O
    out = F.linear(heads.transpose(1, 2).reshape(B, T, C), attn.out_proj.weight, attn.out_proj.bias)
    if cfg.scale_heads and cfg.head_scale_position == "after_out_proj":
        out = torch.einsum("bthd,h->bthd", out.view(B, T, H, hd), g).reshape(B, T, C)  # fairseq
    return out


def reference_ffn(block, x: torch.Tensor, cfg) -> torch.Tensor:
    h = F.linear(x, block.fc1.weight, block.fc1.bias)
    if cfg.ffn_glu:  # GeGLU: the first d_ffn outputs gate the second d_ffn
        h = act_ref(cfg, h[..., : cfg.d_ffn]) * h[..., cfg.d_ffn :]
    else:
        h = act_ref(cfg, h)
    if cfg.scale_fc:
        h = norm_ref(block.ffn_hidden_norm, h)
    return F.linear(h, block.fc2.weight, block.fc2.bias)


def reference_block(block, x: torch.Tensor, cfg) -> torch.Tensor:
    """pre: x + f(N(x)); post: N(x + f(x)); sandwich: x + N'(f(N(x))); olmo2: x + N'(f(x));
    deepnorm: N(α·x + f(x)); hybrid (HybridNorm): x + attn(x), then y + ffn(y) with y = N(x);
    λresid scales the residual, NormFormer's norms sit inside f."""
    p = cfg.norm_position
    alpha = (2 * cfg.n_layer) ** 0.25 if p == "deepnorm" else 1.0

    def sublayer(x, norm, f, post_norm, gain, before=p in ("pre", "sandwich")):
        h = norm_ref(norm, x) if before else x
        if p == "hybrid" and before:  # HybridNorm's FFN: its residual is the normalised input
            x = h
        h = f(h)
        if p in ("sandwich", "olmo2"):
            h = norm_ref(post_norm, h)
        residual = x if gain is None else x * gain
        out = alpha * residual + h
        return norm_ref(norm, out) if p in ("post", "deepnorm") else out

    def attention(h):
        h = reference_attention(block.attn, h, cfg)
        return norm_ref(block.attn_out_norm, h) if cfg.scale_attn else h

    attn_gain = block.attn_resid_gain if cfg.scale_resids_attn else None
    x = sublayer(x, block.attn_norm, attention, block.attn_post_norm, attn_gain)
    ffn_gain = block.resid_gain if cfg.scale_resids else None
    ffn = lambda h: reference_ffn(block, h, cfg)  # noqa: E731
    before = p in ("pre", "sandwich", "hybrid")
    return sublayer(x, block.ffn_norm, ffn, block.ffn_post_norm, ffn_gain, before=before)


def check_block(cfg, seed: int = 0) -> None:
    block = Block(cfg).eval()
    randomize(block, seed)
    block.double()  # float64 so that only a semantic difference can exceed the tolerance
    x = torch.randn(2, 7, cfg.d_model, dtype=torch.float64)
    torch.testing.assert_close(block(x, None), reference_block(block, x, cfg), rtol=1e-9, atol=1e-9)


# the placements with norm layers: nGPT's (no norm layer, test_ngpt.py) has its own reference
LAYERED = [p for p in NORM_POSITIONS if not PLACEMENTS[p].hypersphere]
PLACEMENT_COMBOS = list(itertools.product(LAYERED, (False, True), NORMS))


@pytest.mark.parametrize("placement,qk_norm,norm", PLACEMENT_COMBOS)
def test_block_matches_hand_reference(placement, qk_norm, norm):
    check_block(preset("prenorm-tiny", norm_position=placement, qk_norm=qk_norm, norm=norm))


@pytest.mark.parametrize("placement", LAYERED)
def test_placements_combine_with_normformer_ops(placement):
    ops = dict(scale_fc=True, scale_heads=True, scale_resids=placement != "deepnorm")
    ops["scale_attn"] = placement not in ("sandwich", "olmo2")  # those already normalise the output
    check_block(preset("prenorm-tiny", norm_position=placement, qk_norm=True, **ops), seed=3)


def test_norms_without_gain_have_no_parameters():
    for norm in ("layernorm", "rmsnorm"):
        cfg = preset("sandwich-tiny", norm=norm, norm_affine=False, qk_norm=True)
        block = Block(cfg)
        norms = [m for m in block.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]
        assert len(norms) == 6 and all(not list(m.parameters()) for m in norms)
        check_block(cfg)


def test_rmsnorm_is_torch_rmsnorm():
    cfg = preset("rmsprenorm-tiny", layer_norm_eps=1e-6)
    ours = make_norm(cfg, 64)
    theirs = nn.RMSNorm(64, eps=1e-6)
    randomize(ours, seed=4)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 64) * 3 + 1
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    # and RMSNorm is what its formula says (no mean-centring, no bias)
    torch.testing.assert_close(ours(x), x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * ours.weight)
    every_norm = [m for m in Transformer(cfg).modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]
    assert every_norm and all(isinstance(m, nn.RMSNorm) for m in every_norm)


def test_deepnorm_alpha_beta_follow_the_paper():
    for n in (1, 2, 6, 12, 100):  # DeepNet, decoder-only: α = (2N)^(1/4), β = (8N)^(-1/4)
        alpha, beta = deepnorm_alpha_beta(n)
        assert alpha == pytest.approx((2 * n) ** 0.25) and beta == pytest.approx((8 * n) ** -0.25)
    assert deepnorm_alpha_beta(2) == pytest.approx((2.0**0.5, 0.5))
    cfg = preset("deepnorm-small")
    assert all(b.alpha == pytest.approx((2 * cfg.n_layer) ** 0.25) for b in Transformer(cfg).blocks)


def test_deepnorm_init_scales_ffn_v_and_out_proj_by_beta():
    torch.manual_seed(0)
    cfg = preset("deepnorm-small")
    model = Transformer(cfg)
    beta = (8 * cfg.n_layer) ** -0.25
    d, f = cfg.d_model, cfg.d_ffn
    xavier = lambda fan_in, fan_out: math.sqrt(2 / (fan_in + fan_out))  # noqa: E731
    for block in model.blocks:
        q, k, v = block.attn.qkv.weight.chunk(3)
        expected = {
            "q": (q, xavier(d, d)),
            "k": (k, xavier(d, d)),
            "v": (v, beta * xavier(d, d)),
            "out_proj": (block.attn.out_proj.weight, beta * xavier(d, d)),
            "fc1": (block.fc1.weight, beta * xavier(d, f)),
            "fc2": (block.fc2.weight, beta * xavier(f, d)),
        }
        for name, (w, std) in expected.items():
            assert float(w.detach().std()) == pytest.approx(std, rel=0.03), name
    # the Pre-LN init is untouched: fairseq's, fc1 nn.Linear's default U(±1/sqrt(d))
    torch.manual_seed(0)
    pre = Transformer(preset("prenorm-small"))
    assert float(pre.blocks[0].fc1.weight.detach().std()) == pytest.approx((3 * d) ** -0.5, rel=0.03)


def test_final_norm_defaults_per_placement():
    expected = {
        "pre": True,
        "sandwich": True,
        "olmo2": True,
        "post": False,
        "deepnorm": False,
        "hybrid": True,
        "ngpt": False,
    }
    assert {p: preset("prenorm-tiny", norm_position=p).final_norm for p in NORM_POSITIONS} == expected


def test_presets_name_their_architecture():
    for arch in ("sandwich", "olmo2norm", "deepnorm", "qknorm", "rmsprenorm"):
        for size in ("tiny", "small"):
            assert preset(f"{arch}-{size}").architecture == arch
    assert (
        preset("olmo2norm-tiny", qk_norm=True, norm="rmsnorm").architecture
        == "olmo2norm+qk_norm+norm=rmsnorm"
    )
    assert preset("prenorm-tiny", norm_affine=False).architecture == "prenorm+norm_affine=False"
    assert set(ARCHITECTURES) >= {"prenorm", "normformer", "postnorm", "sandwich", "olmo2norm", "deepnorm"}


def test_width_not_a_multiple_of_64_works():
    """Table 4's width control: d_model 780 with 12 heads has head_dim 65."""
    cfg = preset("prenorm-125M-wide")
    assert (cfg.d_model, cfg.head_dim) == (780, 65)
    with torch.device("meta"):
        # 127.7M with GPT-2's learned positions; the paper's recipe has sinusoidal ones (2048 x 780 fewer)
        assert Transformer(cfg).num_params() == pytest.approx(127.7e6 - 2048 * 780, rel=1e-3)
    small = ModelConfig(vocab_size=97, n_layer=1, d_model=130, n_head=2, d_ffn=64, max_seq_len=32)
    check_kv_cache_matches_recompute(small, randomized=False)  # randomized, its logits are too large


# --- transformers' Gemma 2 and OLMo 2 decoder layers, as an independent reference -------------------------


# HF's RMSNorms compute in float32 whatever the input dtype: agreement to float32 rounding is the test.
HF_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def causal_additive_mask(T: int) -> torch.Tensor:
    return torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]


def no_rotation(x: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's (cos, sin) at angle zero: the layers' rotary positions become the identity (ours are
    absolute embeddings added before the first block, so the layers are compared without positions)."""
    shape = (x.shape[0], x.shape[1], head_dim)
    return torch.ones(shape, dtype=x.dtype), torch.zeros(shape, dtype=x.dtype)


def glu_block(placement: str, n_head: int, qk_norm: bool) -> tuple[Block, ModelConfig]:
    """Our block in the shape HF's layers have: RMSNorm, GeGLU FFN (exact GELU), no biases."""
    cfg = ModelConfig(
        vocab_size=97, n_layer=2, d_model=32, n_head=n_head, d_ffn=48, max_seq_len=16,
        norm_position=placement, norm="rmsnorm", ffn_glu=True, qk_norm=qk_norm, layer_norm_eps=1e-6,
    )  # fmt: skip
    block = Block(cfg).eval()
    randomize(block, seed=5)
    with torch.no_grad():
        for m in block.modules():
            if isinstance(m, nn.Linear):
                m.bias.zero_()
    return block.double(), cfg


def load_attention_and_mlp(theirs: nn.Module, block: Block, cfg) -> None:
    q, k, v = block.attn.qkv.weight.split(cfg.d_model)
    gate, up = block.fc1.weight.split(cfg.d_ffn)
    with torch.no_grad():
        for proj, w in (
            (theirs.self_attn.q_proj, q),
            (theirs.self_attn.k_proj, k),
            (theirs.self_attn.v_proj, v),
        ):
            proj.weight.copy_(w)
        theirs.self_attn.o_proj.weight.copy_(block.attn.out_proj.weight)
        theirs.mlp.gate_proj.weight.copy_(gate)
        theirs.mlp.up_proj.weight.copy_(up)
        theirs.mlp.down_proj.weight.copy_(block.fc2.weight)


def test_sandwich_matches_transformers_gemma2_layer():
    """Gemma 2's layer with its own quirks switched off: its RMSNorm gain is (1 + w), so it gets our gain
    minus one; no logit soft-capping; query scale 1/sqrt(head_dim); full (not sliding) attention."""
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer

    block, cfg = glu_block("sandwich", n_head=4, qk_norm=False)
    hf_cfg = Gemma2Config(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, head_dim=8, hidden_activation="gelu", rms_norm_eps=1e-6,
        query_pre_attn_scalar=8, attn_logit_softcapping=None, final_logit_softcapping=None,
        layer_types=["full_attention"], attention_bias=False,
    )  # fmt: skip
    hf_cfg._attn_implementation = "eager"
    theirs = Gemma2DecoderLayer(hf_cfg, layer_idx=0).eval().double()
    load_attention_and_mlp(theirs, block, cfg)
    norms = {
        "input_layernorm": block.attn_norm,
        "post_attention_layernorm": block.attn_post_norm,
        "pre_feedforward_layernorm": block.ffn_norm,
        "post_feedforward_layernorm": block.ffn_post_norm,
    }
    with torch.no_grad():
        for name, ours in norms.items():
            getattr(theirs, name).weight.copy_(ours.weight - 1)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        expected = theirs(x, position_embeddings=no_rotation(x, 8), attention_mask=causal_additive_mask(9))
        torch.testing.assert_close(block(x), expected, **HF_TOLERANCE)
        assert (block(x) - x).abs().max() > 0.1  # the layer does something the tolerance could miss


@pytest.mark.parametrize("n_head,qk_norm", [(4, False), (1, True)])
def test_olmo2_order_matches_transformers_olmo2_layer(n_head, qk_norm):
    """OLMo 2's layer (transformers) norms q and k over the whole projection (all heads at once); ours
    norms each head over head_dim, as the issue asks and as Gemma 3 / Qwen 3 do. The two agree with
    one head; with several heads OLMo 2's q/k norms are removed and the order alone is compared."""
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2DecoderLayer

    block, cfg = glu_block("olmo2", n_head=n_head, qk_norm=qk_norm)
    hf_cfg = Olmo2Config(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=n_head, num_key_value_heads=n_head, hidden_act="gelu", rms_norm_eps=1e-6,
        attention_bias=False,
    )  # fmt: skip
    hf_cfg._attn_implementation = "eager"
    theirs = Olmo2DecoderLayer(hf_cfg, layer_idx=0).eval().double()
    load_attention_and_mlp(theirs, block, cfg)
    with torch.no_grad():
        theirs.post_attention_layernorm.weight.copy_(block.attn_post_norm.weight)
        theirs.post_feedforward_layernorm.weight.copy_(block.ffn_post_norm.weight)
        if qk_norm:
            theirs.self_attn.q_norm.weight.copy_(block.attn.q_head_norm.weight)
            theirs.self_attn.k_norm.weight.copy_(block.attn.k_head_norm.weight)
        else:
            theirs.self_attn.q_norm, theirs.self_attn.k_norm = nn.Identity(), nn.Identity()
    assert block.attn_norm is None and block.ffn_norm is None  # no pre-norm
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        expected = theirs(
            x, position_embeddings=no_rotation(x, cfg.head_dim), attention_mask=causal_additive_mask(9)
        )
        torch.testing.assert_close(block(x), expected, **HF_TOLERANCE)


# --- inference: KV cache and folded head gains ----------------------------------------------------------


def random_model(cfg: ModelConfig, seed: int = 0, randomized: bool = True) -> Transformer:
    """The training init, then (if ``randomized``) every parameter made non-trivial."""
    torch.manual_seed(seed)
    model = Transformer(cfg).eval()
    if randomized:
        randomize(model, seed)
    return model


def check_kv_cache_matches_recompute(
    cfg: ModelConfig, randomized: bool = True, dtype: torch.dtype = torch.float32
) -> None:
    """Token by token with the cache, the last logits equal a full forward; greedy batched generation
    with the cache, eager and with static shapes, equals greedy recomputation. In float64 (``dtype``)
    the tolerance is 1e-9, so that only a difference of computation, not float32 rounding of
    unnormalised activations, can fail."""
    model = random_model(cfg, randomized=randomized).to(dtype)
    ids = torch.tensor([PROMPTS[0]])
    cache = KVCache(model.cfg, 1, 20, dtype=dtype)
    atol = 1e-5 if dtype == torch.float32 else 1e-9
    with torch.no_grad():
        logits = model(ids, cache=cache)[:, -1]
        for _ in range(10):
            torch.testing.assert_close(logits, model(ids)[:, -1], rtol=0, atol=atol)
            token = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, token], dim=1)
            logits = model(token, cache=cache)[:, -1]
    want = [greedy_by_recompute(model, p, 8) for p in PROMPTS]
    assert generate(model, PROMPTS, max_new_tokens=8, batch_size=4) == want
    assert (
        generate(model, PROMPTS, max_new_tokens=8, batch_size=4, speed=Fast(static=True)) == want
    )  # a GPU's steps


def small_cfg(**flags) -> ModelConfig:
    return ModelConfig(vocab_size=97, n_layer=2, d_model=32, n_head=4, d_ffn=64, max_seq_len=48, **flags)


@pytest.mark.parametrize("placement,qk_norm,norm", PLACEMENT_COMBOS)
def test_kv_cache_equals_recompute(placement, qk_norm, norm):
    cfg = small_cfg(norm_position=placement, qk_norm=qk_norm, norm=norm)
    check_kv_cache_matches_recompute(cfg, dtype=torch.float64)


@pytest.mark.parametrize("placement", ["sandwich", "olmo2", "deepnorm"])
def test_kv_cache_equals_recompute_with_normformer_ops_and_no_gain(placement):
    ops = dict(scale_fc=True, scale_heads=True, head_scale_position="before_out_proj", qk_norm=True)
    check_kv_cache_matches_recompute(small_cfg(norm_position=placement, norm_affine=False, **ops))


@pytest.mark.parametrize("placement", ["sandwich", "olmo2", "deepnorm"])
def test_folded_head_scale_keeps_logits(placement):
    model = random_model(small_cfg(norm_position=placement, scale_heads=True, qk_norm=True), seed=2)
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        before = model(idx)
        model.fold_head_scale()
        torch.testing.assert_close(model(idx), before, rtol=1e-5, atol=1e-5)
    assert all(b.attn.head_gain is None for b in model.blocks)


def test_cache_stores_normed_keys():
    model = random_model(small_cfg(qk_norm=True, norm="rmsnorm"))
    ids = torch.tensor([PROMPTS[0]])
    cache = KVCache(model.cfg, 1, 20)
    with torch.no_grad():
        model(ids, cache=cache)
        block = model.blocks[0]
        x = block.attn_norm(model.tok_emb(ids) + model.pos_emb.weight[: ids.shape[1]])
        q, k, v = block.attn.project_heads(x)
        raw_k = block.attn.qkv(x).split(32, dim=2)[1].view(1, -1, 4, 8).transpose(1, 2)
    T = ids.shape[1]
    torch.testing.assert_close(cache.layers[0].keys[:, :, :T], k)
    torch.testing.assert_close(k, norm_ref(block.attn.k_head_norm, raw_k))
    assert not torch.allclose(k, raw_k, atol=1e-3)
