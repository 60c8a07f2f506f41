"""Issue 54's schemes against hand-written references of their papers' equations: Derf (Chen, Lu, Zhu, Sun &
Liu 2025, "Stronger Normalization-Free Transformers"), gated attention (Qiu et al. 2025, "Gated
Attention for Large Language Models") and HybridNorm / HybridNorm* (Zhuo et al. 2025, "HybridNorm:
Towards Stable and Efficient Transformer Training via Hybrid Normalization").

The reference forward below is the whole model in plain torch (embeddings, every block by its paper's
equation, final norm, tied head) on the module's own weights, in float64; then the KV cache against
recomputation, parameter and FLOP counts, training, saving and loading.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_norm_placements import check_kv_cache_matches_recompute, norm_ref, randomize, reference_ffn
from test_norm_schemes import trained_scheme
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nfeval.base.errors import ConfigError
from nfeval.engine.model.config import ARCHITECTURES, ModelConfig, preset
from nfeval.engine.model.flops import FLOPS_PER_ELEMENT, TRAINING_PASSES, training_flops_breakdown
from nfeval.engine.model.model import Transformer
from nfeval.engine.model.norms import DynamicErf
from nfeval.engine.training.train_config import parse_set

SCHEMES = ("derf", "gatedattn", "gatedattnhead", "hybridnorm", "hybridnormstar")


def reference_attention(attn, x: torch.Tensor, cfg) -> torch.Tensor:
    """Causal multi-head attention with an explicit softmax, Table 4's q, k and v norms over d_model, the
    per-head q/k and v norms (HybridNorm's QKV-Norm: each head's q, k and v over head_dim), and gated
    attention's Y' = Y ⊙ σ(X W_θ + b) on the heads' concatenated output Y before the output projection, X
    the input (one gate value per head, or one per channel)."""
    B, T, C = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    q, k, v = (F.linear(x, w, b) for w, b in zip(attn.qkv.weight.split(C), attn.qkv.bias.split(C)))
    if cfg.qkv_norm:
        q, k, v = norm_ref(attn.query_norm, q), norm_ref(attn.key_norm, k), norm_ref(attn.value_norm, v)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    if cfg.qk_norm:
        q, k = norm_ref(attn.q_head_norm, q), norm_ref(attn.k_head_norm, k)
    if cfg.v_norm:
        v = norm_ref(attn.v_head_norm, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2)  # B, T, H, hd
    if cfg.attn_gate is not None:
        gate = torch.sigmoid(x @ attn.gate.weight.T + attn.gate.bias)
        y = y * (gate[..., None] if cfg.attn_gate == "headwise" else gate.view(B, T, H, hd))
    return F.linear(y.reshape(B, T, C), attn.out_proj.weight, attn.out_proj.bias)


def reference_forward(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """Logits of a causal ``model`` from the papers' equations, block by block:

    Pre-LN        x + F(N(x))      N may be Derf: γ·erf(α·x + s) + β (``norm_ref``); the attention
                                   F may be gated (``reference_attention``)
    HybridNorm    Y = x + MHA_QKV(x), then N(Y) + FFN(N(Y)) (its MHA normalises q, k and v)
    HybridNorm*   HybridNorm's blocks, but the first Pre-LN (its MHA still normalising q, k and v)
    """
    cfg = model.cfg
    T = idx.shape[1]
    x = F.embedding(idx, model.tok_emb.weight) * math.sqrt(cfg.d_model) + model.sin_pos[:T]
    for i, block in enumerate(model.blocks):
        if cfg.norm_position == "hybrid" and not (i == 0 and cfg.first_block_prenorm):
            y = x + reference_attention(block.attn, x, cfg)
            y = norm_ref(block.ffn_norm, y)
            x = y + reference_ffn(block, y, cfg)
            continue
        assert cfg.norm_position == "pre" or cfg.first_block_prenorm
        x = x + reference_attention(block.attn, norm_ref(block.attn_norm, x), cfg)
        x = x + reference_ffn(block, norm_ref(block.ffn_norm, x), cfg)
    return norm_ref(model.final_norm, x) @ model.tok_emb.weight.T


def scheme_model(name: str, seed: int = 0, **overrides) -> Transformer:
    """The preset ``NAME-tiny`` (fairseq's recipe) at a small vocabulary, every parameter made non-trivial,
    in float64."""
    torch.manual_seed(seed)
    cfg = preset(f"{name}-tiny", vocab_size=97, max_seq_len=48, **{"n_layer": 3, **overrides})
    model = Transformer(cfg).eval()
    randomize(model, seed)
    return model.double()


def check_against_reference(model: Transformer) -> torch.Tensor:
    idx = torch.randint(0, model.cfg.vocab_size, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(idx)
        torch.testing.assert_close(got, reference_forward(model, idx), rtol=1e-9, atol=1e-9)
    return got


def small_scheme_cfg(name: str, **overrides) -> ModelConfig:
    fields = dict(vocab_size=97, n_layer=4, d_model=32, n_head=4, d_ffn=64, max_seq_len=48)
    return ModelConfig(**{**ARCHITECTURES[name], **fields, **overrides})


# --- Derf ------------------------------------------------------------------------------------------------


def test_derf_is_gamma_erf_alpha_x_plus_s_plus_beta():
    derf = DynamicErf(6, alpha_init=0.7)
    assert [n for n, _ in derf.named_parameters()] == ["alpha", "weight", "bias", "shift"]
    assert derf.alpha.shape == derf.shift.shape == (1,)  # one scalar each, as the authors' Dynamic_erf
    assert derf.alpha.item() == pytest.approx(0.7) and derf.shift.item() == 0
    assert torch.equal(derf.weight, torch.ones(6)) and torch.equal(derf.bias, torch.zeros(6))
    randomize(derf, seed=3)
    x = torch.randn(2, 5, 6) * 3
    a, s, g, b = derf.alpha.item(), derf.shift.item(), derf.weight.detach(), derf.bias.detach()
    torch.testing.assert_close(derf(x), g * torch.erf(a * x + s) + b)
    bare = DynamicErf(6, alpha_init=0.5, affine=False)  # norm_affine=False: erf(α·x + s), α and s learned
    assert [n for n, _ in bare.named_parameters()] == ["alpha", "shift"]
    torch.testing.assert_close(bare(x), torch.erf(0.5 * x))


@pytest.mark.parametrize(
    "overrides",
    [{}, {"qk_norm": True, "dyt_alpha_attn": 0.8, "dyt_alpha_other": 0.2}, {"norm_affine": False}],
)
def test_derf_matches_the_papers_equation(overrides):
    model = scheme_model("derf", **overrides)
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())
    check_against_reference(model)


def test_every_norm_of_a_derf_model_is_derf_with_its_alpha():
    cfg = preset("derf-tiny", qk_norm=True, dyt_alpha_attn=0.8, dyt_alpha_other=0.2)
    norms = {n: m for n, m in Transformer(cfg).named_modules() if isinstance(m, DynamicErf)}
    assert len(norms) == 4 * cfg.n_layer + 1  # two per block, the q and k norms, the final norm
    for name, m in norms.items():
        assert m.alpha.item() == pytest.approx(0.8 if ".attn" in name else 0.2), name
        assert m.shift.item() == 0 and torch.equal(m.weight, torch.ones_like(m.weight)), name


def test_derf_alpha_and_shift_are_learned():
    model = scheme_model("derf").float().train()
    idx = torch.randint(0, 97, (2, 11))
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    scalars = [p for m in model.modules() if isinstance(m, DynamicErf) for p in (m.alpha, m.shift)]
    assert scalars and all(p.grad is not None and p.grad.abs().item() > 0 for p in scalars)


@pytest.mark.parametrize("affine", [True, False])
def test_derf_parameter_count(affine):
    """A Derf holds two scalars (α, s) more than a LayerNorm (γ and β per channel, or nothing)."""
    derf, ln = preset("derf-tiny", norm_affine=affine), preset("prenorm-tiny", norm_affine=affine)
    n_norms = 2 * derf.n_layer + 1
    assert Transformer(derf).num_params() - Transformer(ln).num_params() == 2 * n_norms
    for m in Transformer(derf).modules():
        if isinstance(m, DynamicErf):
            assert sum(p.numel() for p in m.parameters()) == derf.norm_param_count(m.dim)


@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
def test_derf_flops_are_its_ops_per_element(size):
    """α multiply, s add, erf (counted 4), gain, bias: 8 per element, in place of each norm."""
    derf, pre = preset(f"derf-{size}"), preset(f"prenorm-{size}")
    a, b = training_flops_breakdown(pre, 512), training_flops_breakdown(derf, 512)
    assert FLOPS_PER_ELEMENT["derf"] == 8
    assert b["layer_norms"] == TRAINING_PASSES * 8 * (2 * derf.n_layer + 1) * derf.d_model
    assert {k for k in a if a[k] != b[k]} == {"layer_norms"}


def test_derf_draws_pre_lns_weights():
    """Derf adds no draw: the same seed gives Pre-LN's weights, the norms at γ 1, β 0, α0, s 0."""
    cfg = preset("derf-tiny")
    torch.manual_seed(0)
    ours = Transformer(cfg).state_dict()
    torch.manual_seed(0)
    for key, value in Transformer(cfg.replace(norm="layernorm")).state_dict().items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0, msg=key)


# --- gated attention --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("gatedattn", {}),
        ("gatedattnhead", {}),
        ("gatedattn", {"qk_norm": True}),
        ("gatedattnhead", {"norm": "rmsnorm"}),
    ],
)
def test_gated_attention_matches_the_papers_equation(name, overrides):
    check_against_reference(scheme_model(name, **overrides))


@pytest.mark.parametrize("name", ["gatedattn", "gatedattnhead"])
def test_an_open_gate_is_pre_ln(name):
    """With σ(·) = 1 (W_θ 0, a large bias) the gated model computes Pre-LN's logits on the same weights; a
    gate that differs per token changes them."""
    gated, pre = scheme_model(name), scheme_model("prenorm")
    pre.load_state_dict({k: v for k, v in gated.state_dict().items() if ".attn.gate." not in k})
    idx = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        assert (gated(idx) - pre(idx)).abs().max() > 1e-3
        for block in gated.blocks:
            block.attn.gate.weight.zero_()
            block.attn.gate.bias.fill_(100.0)
        torch.testing.assert_close(gated(idx), pre(idx), rtol=1e-12, atol=1e-12)


def test_the_gate_is_per_head_or_per_channel():
    for gate, width in (("headwise", 4), ("elementwise", 64)):
        cfg = preset("prenorm-tiny", attn_gate=gate)
        assert cfg.attn_gate_width == width
        attn = Transformer(cfg).blocks[0].attn
        assert attn.gate.weight.shape == (width, 64) and attn.gate.bias.shape == (width,)
    assert (
        preset("prenorm-tiny").attn_gate_width == 0
        and Transformer(preset("prenorm-tiny")).blocks[0].attn.gate is None
    )


@pytest.mark.parametrize("name", ["gatedattn", "gatedattnhead"])
@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
def test_gated_attention_parameters_and_flops(name, size):
    """Per block a d × g weight and g biases (g: n_head or d_model); FLOPs: the gate's matmul (6 per
    weight), and per token g sigmoids (4) and bias adds (1) and d products with the attention output."""
    cfg, pre = preset(f"{name}-{size}"), preset(f"prenorm-{size}")
    d, L = cfg.d_model, cfg.n_layer
    g = cfg.n_head if name == "gatedattnhead" else d
    with torch.device("meta"):
        assert Transformer(cfg).num_params() - Transformer(pre).num_params() == L * (d * g + g)
    a, b = training_flops_breakdown(pre, 512), training_flops_breakdown(cfg, 512)
    extra = {k: b[k] - a[k] for k in a if a[k] != b[k]}
    sigmoid, add, mul = (FLOPS_PER_ELEMENT[k] for k in ("sigmoid", "add", "multiply"))
    assert extra == {
        "weight_matmuls": TRAINING_PASSES * 2 * L * d * g,
        "attn_gate": TRAINING_PASSES * L * ((sigmoid + add) * g + mul * d),
    }


@pytest.mark.parametrize("name", ["gatedattn", "gatedattnhead"])
def test_the_gate_matmul_count_is_torchs(name):
    """torch's FlopCounterMode over forward and backward: the gate adds the matmul FLOPs counted for it."""

    def counted(arch: str) -> float:
        torch.manual_seed(0)
        model = Transformer(preset(f"{arch}-tiny", max_seq_len=64))
        idx = torch.randint(4, 512, (2, 64))
        with FlopCounterMode(display=False) as counter:
            model.loss(idx, idx).backward()
        return counter.get_total_flops() / idx.numel()

    ours = {a: training_flops_breakdown(preset(f"{a}-tiny"), 64)["weight_matmuls"] for a in (name, "prenorm")}
    assert counted(name) - counted("prenorm") == pytest.approx(ours[name] - ours["prenorm"])


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_fairseq_init_draws_the_gate_as_the_query_rows(gate):
    """fairseq's q: xavier-uniform with gain 1/√2 over its d × d block, U(±√(3/(2d))); the gate's rows
    are drawn from that distribution (in the authors' code they are rows of the query projection)."""
    torch.manual_seed(0)
    cfg = preset("prenorm-small", attn_gate=gate, d_model=256, n_head=8)
    bound = math.sqrt(3 / (2 * cfg.d_model))
    weights = torch.cat([b.attn.gate.weight.detach().flatten() for b in Transformer(cfg).blocks])
    assert weights.abs().max() <= bound
    assert float(weights.std()) == pytest.approx(bound / math.sqrt(3), rel=0.03)


def test_an_encoders_last_layer_gates_its_own_rows():
    """A masked LM's classifier computes the last layer at the first row only: its gate reads that row."""
    model = scheme_model("gatedattn", objective="mlm")
    idx = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        full = model.encode(idx)[:, 0]
        torch.testing.assert_close(model.encode(idx, last_layer_positions=slice(1))[:, 0], full)


# --- HybridNorm, HybridNorm* ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("hybridnorm", {}),
        ("hybridnormstar", {}),
        ("hybridnorm", {"norm": "rmsnorm"}),
        ("hybridnormstar", {"norm": "derf", "n_layer": 4}),
        ("hybridnorm", {"attn_gate": "elementwise"}),  # the gate reads the block's unnormalised input
    ],
)
def test_hybridnorm_matches_the_papers_equation(name, overrides):
    check_against_reference(scheme_model(name, **overrides))


def test_hybridnorm_blocks_hold_the_papers_norms():
    """HybridNorm: no norm before attention, each head's q, k and v normalised over head_dim (its authors'
    q_norm, k_norm, v_norm of size d_model // n_heads), the FFN's input norm whose output is the residual;
    HybridNorm*'s first block Pre-LN with its q/k/v norms; both end in a final norm."""
    for name, first_pre in (("hybridnorm", False), ("hybridnormstar", True)):
        model = Transformer(preset(f"{name}-small"))
        assert model.final_norm is not None
        for i, block in enumerate(model.blocks):
            pre = first_pre and i == 0
            assert (block.attn_norm is not None, block.ffn_residual_after_norm) == (pre, not pre), (name, i)
            assert block.ffn_norm is not None and block.attn_out_norm is None and block.attn_post_norm is None
            head_norms = (block.attn.q_head_norm, block.attn.k_head_norm, block.attn.v_head_norm)
            assert [m.normalized_shape for m in head_norms] == [(128 // 4,)] * 3
            assert block.attn.query_norm is block.attn.value_norm is None


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_hybridnorm_parameters_and_flops(norm):
    """Against Pre-LN: per block three head_dim-wide norms (q, k, v; one gain shared by the heads) in, the
    attention input norm out; HybridNorm* keeps one attention input norm (its first block's). FLOPs: those
    norms' elements (each head's: d per token for each of q, k and v)."""
    pre = preset("prenorm-small", norm=norm)
    d, L, per_norm = pre.d_model, pre.n_layer, pre.norm_param_count(pre.d_model)
    cost = FLOPS_PER_ELEMENT["layer_norm" if norm == "layernorm" else "rms_norm"]
    base = training_flops_breakdown(pre, 512)
    for name, first_pre in (("hybridnorm", 0), ("hybridnormstar", 1)):
        cfg = preset(f"{name}-small", norm=norm)
        with torch.device("meta"):
            added = Transformer(cfg).num_params() - Transformer(pre).num_params()
        assert added == L * (3 * pre.norm_param_count(pre.head_dim) - per_norm) + first_pre * per_norm
        flops = training_flops_breakdown(cfg, 512)
        extra = {k: flops[k] - base[k] for k in base if flops[k] != base[k]}
        assert extra == {"layer_norms": TRAINING_PASSES * cost * d * (2 * L + first_pre)}


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(first_block_prenorm=True), "first_block_prenorm=True with norm_position='pre'"),
        (dict(first_block_prenorm=True, norm_position="post"), "HybridNorm model"),
        (dict(ln_scaling=True, norm_position="hybrid"), "ln_scaling=True with norm_position='hybrid'"),
        (dict(norm_position="hybrid", qkv_norm=True, qk_norm=True), "both normalise the queries and keys"),
        (dict(norm_position="hybrid", qkv_norm=True, v_norm=True), "both normalise the values"),
        (dict(norm_position="ngpt", v_norm=True), "v_norm=True with norm_position='ngpt'"),
    ],
)
def test_refused_combinations_name_the_fields(fields, message):
    with pytest.raises(ConfigError, match=message):
        preset("prenorm-tiny", **fields)


def test_fields_come_from_set_like_every_field():
    overrides = parse_set(
        ["norm=derf", "attn_gate=headwise", "norm_position=hybrid", "first_block_prenorm=true"]
    )
    assert overrides == dict(
        norm="derf", attn_gate="headwise", norm_position="hybrid", first_block_prenorm=True
    )
    cfg = preset("prenorm-small", qkv_norm=True, **overrides)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg and cfg.layer_placement(0) == "pre"
    assert parse_set(["attn_gate=null"]) == {"attn_gate": None}
    with pytest.raises(ConfigError, match="attn_gate='perhead': expected one of"):
        parse_set(["attn_gate=perhead"])


def test_presets_name_their_architecture():
    for name in SCHEMES:
        for size in ("tiny", "small", "125M"):
            assert preset(f"{name}-{size}").architecture == name
    assert preset("prenorm-tiny", norm_position="hybrid").architecture == "hybridorder"  # no QKV-Norm
    assert preset("hybridnorm-tiny", norm="rmsnorm").architecture == "hybridorder+qk_norm+v_norm+norm=rmsnorm"


# --- every scheme: KV cache, training, saving and loading ------------------------------------------------


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("derf", {"qk_norm": True, "scale_heads": True}),
        ("gatedattn", {"qk_norm": True}),
        ("gatedattnhead", {"scale_heads": True, "head_scale_position": "before_out_proj"}),
        ("hybridnorm", {}),
        ("hybridnormstar", {"attn_gate": "headwise", "norm": "rmsnorm"}),
    ],
)
def test_kv_cache_equals_recompute(name, overrides):
    check_kv_cache_matches_recompute(small_scheme_cfg(name, **overrides), dtype=torch.float64)


@pytest.mark.parametrize("name", SCHEMES)
def test_each_scheme_trains_saves_and_loads(tmp_path, name):
    """``nfeval train --preset NAME-tiny``: the checkpoint loads to the weights it saved, its config is the
    preset's and names the scheme."""
    assert trained_scheme(tmp_path, name, n_layer=3).config.architecture == name
