"""NormFormer's Table 4 controls (Shleifer et al. 2021, §5) and both HeadScale placements, each against a
hand-written reference; parameter counts, FLOPs, the KV cache and the combinations refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_norm_placements import (
    check_block,
    check_kv_cache_matches_recompute,
    norm_ref,
    randomize,
    small_cfg,
)
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nfeval.base.errors import ConfigError
from nfeval.engine.model.config import SIZES, ModelConfig, preset
from nfeval.engine.model.flops import training_flops_breakdown
from nfeval.engine.model.model import Block, SelfAttention, Transformer
from nfeval.engine.training.objective import Objective

# Each control as Table 4 applies it to NormFormer (the GeGLU control takes the FFN LN's place).
CONTROLS = {
    "ffn_glu": dict(ffn_glu=True, scale_fc=False),
    "scale_resids_attn": dict(scale_resids_attn=True),
    "scale_resids_attn+ffn": dict(scale_resids_attn=True, scale_resids=True),
    "resid_scale_scalar": dict(scale_resids=True, resid_scale_scalar=True),
    "resid_scale_scalar+attn": dict(scale_resids_attn=True, resid_scale_scalar=True),
    "normformer_norm=rmsnorm": dict(normformer_norm="rmsnorm"),
    "qkv_norm": dict(qkv_norm=True),
    "qkv_norm+rmsnorm": dict(qkv_norm=True, normformer_norm="rmsnorm"),
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_control_matches_hand_reference(control):
    check_block(preset("normformer-tiny", **CONTROLS[control]), seed=1)


@pytest.mark.parametrize("control", list(CONTROLS))
def test_control_changes_the_block(control):
    """Each control is a different function from NormFormer (the reference could not hide a no-op)."""
    cfg = preset("normformer-tiny", **CONTROLS[control])
    base_cfg = preset("normformer-tiny")
    block, base = Block(cfg).eval(), Block(base_cfg).eval()
    randomize(block, seed=2)
    randomize(base, seed=2)
    shared = {k: v for k, v in block.state_dict().items() if base.state_dict().get(k, v).shape == v.shape}
    base.load_state_dict(shared, strict=False)
    x = torch.randn(2, 5, cfg.d_model)
    assert not torch.allclose(block(x), base(x), atol=1e-4)


def test_glu_is_gelu_of_first_half_times_second_half():
    cfg = preset("normformer-tiny", ffn_glu=True, scale_fc=False)
    block = Block(cfg).eval()
    randomize(block, seed=3)
    assert block.fc1.weight.shape == (2 * cfg.d_ffn, cfg.d_model)  # d_ffn is the gated width (fc2's input)
    assert block.fc2.weight.shape == (cfg.d_model, cfg.d_ffn)
    x = torch.randn(4, cfg.d_model)
    a = x @ block.fc1.weight[: cfg.d_ffn].T + block.fc1.bias[: cfg.d_ffn]
    b = x @ block.fc1.weight[cfg.d_ffn :].T + block.fc1.bias[cfg.d_ffn :]
    expected = (F.gelu(a) * b) @ block.fc2.weight.T + block.fc2.bias
    torch.testing.assert_close(block.feed_forward(x), expected)


def test_scalar_resid_gain_is_one_number_per_residual():
    cfg = preset("normformer-tiny", scale_resids=True, scale_resids_attn=True, resid_scale_scalar=True)
    block = Block(cfg)
    assert block.resid_gain.shape == (1,) and block.attn_resid_gain.shape == (1,)
    per_channel = Block(preset("normformer-tiny", scale_resids=True, scale_resids_attn=True))
    assert per_channel.resid_gain.shape == (cfg.d_model,) == per_channel.attn_resid_gain.shape


def test_normformer_norm_shapes_only_the_extra_norms():
    block = Block(preset("normformer-tiny", normformer_norm="rmsnorm", qkv_norm=True))
    extra = [block.attn_out_norm, block.ffn_hidden_norm, block.attn.query_norm, block.attn.key_norm]
    assert all(isinstance(m, nn.RMSNorm) for m in [*extra, block.attn.value_norm])
    assert isinstance(block.attn_norm, nn.LayerNorm) and isinstance(block.ffn_norm, nn.LayerNorm)
    # "an LN without bias and mean-centring" is RMSNorm: the mean of its input is not removed
    x = torch.randn(3, 64) + 5.0
    torch.testing.assert_close(block.attn_out_norm(x), norm_ref(block.attn_out_norm, x))
    assert block.attn_out_norm(x).mean() > 0.5 and [n for n, _ in block.attn_out_norm.named_parameters()] == [
        "weight"
    ]


@pytest.mark.parametrize("position", ["before_out_proj", "after_out_proj"])
def test_head_scale_placement_equals_its_formula(position):
    """before_out_proj (the paper): Concat(γ_1 h_1, …, γ_n h_n) W^O + b;
    after_out_proj (fairseq): the out_proj output, bias included, in head-sized chunks, chunk i × γ_i."""
    cfg = preset("normformer-tiny", head_scale_position=position)
    attn = SelfAttention(cfg).eval()
    randomize(attn, seed=4)
    attn.double()
    H, hd, C = cfg.n_head, cfg.head_dim, cfg.d_model
    x = torch.randn(2, 6, C, dtype=torch.float64)
    gamma = attn.head_gain
    plain = SelfAttention(cfg.replace(scale_heads=False)).double().eval()
    plain.load_state_dict(attn.state_dict(), strict=False)
    W, b = attn.out_proj.weight, attn.out_proj.bias
    with torch.no_grad():
        # the heads h_i, concatenated: undo out_proj of the attention without gains
        concat = torch.linalg.solve(W, (plain(x) - b).unsqueeze(-1)).squeeze(-1)
        heads = concat.view(2, 6, H, hd)
        if position == "before_out_proj":
            expected = torch.cat([gamma[i] * heads[:, :, i] for i in range(H)], -1) @ W.T + b
        else:
            out = concat @ W.T + b
            expected = torch.cat([gamma[i] * out[..., i * hd : (i + 1) * hd] for i in range(H)], -1)
        torch.testing.assert_close(attn(x), expected, rtol=1e-8, atol=1e-8)


def test_head_scale_placements_both_fold_into_out_proj():
    for position in ("before_out_proj", "after_out_proj"):
        cfg = preset(
            "normformer-tiny", head_scale_position=position, qkv_norm=True, ffn_glu=True, scale_fc=False
        )
        torch.manual_seed(0)
        model = Transformer(cfg).eval()
        randomize(model, seed=5)
        idx = torch.randint(0, cfg.vocab_size, (2, 10))
        with torch.no_grad():
            before = model(idx)
            model.fold_head_scale()
            torch.testing.assert_close(model(idx), before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("control", list(CONTROLS))
def test_parameter_count_of_each_control(control):
    cfg = preset("normformer-tiny", **CONTROLS[control])
    added = Transformer(cfg).num_params() - Transformer(preset("prenorm-tiny")).num_params()
    assert cfg.normformer_param_count() == added


def test_glu_flops_counted():
    cfg = preset("prenorm-tiny", ffn_glu=True, max_seq_len=64)
    plain = training_flops_breakdown(preset("prenorm-tiny", max_seq_len=64), 64)
    glu = training_flops_breakdown(cfg, 64)
    assert glu["weight_matmuls"] - plain["weight_matmuls"] == 6 * cfg.n_layer * cfg.d_model * cfg.d_ffn
    torch.manual_seed(0)
    obj = Objective(Transformer(cfg))
    x, y = torch.randint(4, 512, (2, 64)), torch.randint(4, 512, (2, 64))
    with FlopCounterMode(display=False) as counter:
        obj(x, y).backward()
    attention = 12.0 * cfg.n_layer * cfg.d_model * 64  # SDPA, which the CPU counter does not see
    counted = counter.get_total_flops() / x.numel()
    assert glu["weight_matmuls"] + glu["attention_matmuls"] - attention == pytest.approx(counted, rel=1e-6)


@pytest.mark.parametrize("control", list(CONTROLS))
def test_kv_cache_equals_recompute(control):
    normformer = dict(scale_attn=True, scale_fc=True, scale_heads=True)
    check_kv_cache_matches_recompute(small_cfg(**{**normformer, **CONTROLS[control]}))


def test_controls_combine_with_the_placements():
    cfg = preset("sandwich-tiny", qkv_norm=True, scale_resids_attn=True, scale_resids=True, ffn_glu=True)
    check_block(cfg, seed=6)
    check_block(preset("deepnorm-tiny", qkv_norm=True, ffn_glu=True, scale_attn=True, norm="rmsnorm"), seed=7)
    check_kv_cache_matches_recompute(
        small_cfg(norm_position="olmo2", qkv_norm=True, resid_scale_scalar=True, scale_resids=True)
    )


BAD = {
    "sandwich already normalises the attention output": (
        dict(norm_position="sandwich", scale_attn=True),
        ["scale_attn", "norm_position"],
    ),
    "olmo2 already normalises the attention output": (
        dict(norm_position="olmo2", scale_attn=True),
        ["scale_attn", "norm_position"],
    ),
    "deepnorm fixes the residual scale": (
        dict(norm_position="deepnorm", scale_resids=True),
        ["scale_resids", "norm_position"],
    ),
    "deepnorm and λresid on attention": (
        dict(norm_position="deepnorm", scale_resids_attn=True),
        ["scale_resids_attn", "norm_position"],
    ),
    "GeGLU replaces the FFN LN": (dict(ffn_glu=True, scale_fc=True), ["ffn_glu", "scale_fc"]),
    "scalar without a λresid": (dict(resid_scale_scalar=True), ["resid_scale_scalar", "scale_resids"]),
    "q/k normed twice": (dict(qkv_norm=True, qk_norm=True), ["qkv_norm", "qk_norm"]),
    "normformer_norm without extra norms": (dict(normformer_norm="rmsnorm"), ["normformer_norm"]),
    "unknown norm": (dict(norm="batchnorm"), ["norm"]),
    "unknown placement": (dict(norm_position="middle"), ["norm_position"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_combinations_raise_config_error_naming_the_fields(case):
    flags, fields = BAD[case]
    with pytest.raises(ConfigError) as err:
        preset("prenorm-tiny", **flags)
    assert all(f in str(err.value) for f in fields)


def test_stored_config_with_a_bad_combination_fails():
    stored = {**SIZES["tiny"], "vocab_size": 512, "norm_position": "sandwich", "scale_attn": True}
    with pytest.raises(ConfigError, match="scale_attn=True with norm_position='sandwich'"):
        ModelConfig.from_dict(stored, source="run/config.json")
