"""The FLOP count charges every op: NormFormer's norms and HeadScale, ResScale, the activation, the
embedding scale; the matmul part is checked against torch's FlopCounterMode in test_engine_parts."""

from __future__ import annotations

import pytest

from nfeval.engine.model.config import preset
from nfeval.engine.model.flops import (
    FLOPS_PER_ELEMENT,
    TRAINING_PASSES,
    training_flops_breakdown,
    training_flops_per_token,
)

LN, MUL = FLOPS_PER_ELEMENT["layer_norm"], FLOPS_PER_ELEMENT["multiply"]


@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
@pytest.mark.parametrize("objective", ["clm", "mlm"])
def test_normformer_costs_its_norms_and_head_scale(size, objective):
    pre = preset(f"prenorm-{size}", objective=objective)
    nf = preset(f"normformer-{size}", objective=objective)
    d, f, L, T = pre.d_model, pre.d_ffn, pre.n_layer, 512
    norms = TRAINING_PASSES * LN * L * (d + f)  # the post-attention LN (d) and the FFN-hidden LN (f)
    head_scale = TRAINING_PASSES * MUL * L * d
    a, b = training_flops_breakdown(pre, T), training_flops_breakdown(nf, T)
    assert b["layer_norms"] - a["layer_norms"] == pytest.approx(norms)
    assert b["head_scale"] - a["head_scale"] == head_scale and a["head_scale"] == 0
    assert {k for k in a if a[k] != b[k]} == {"layer_norms", "head_scale"}
    extra = training_flops_per_token(nf, T) - training_flops_per_token(pre, T)
    assert extra == pytest.approx(norms + head_scale)
    assert training_flops_per_token(nf, T) > training_flops_per_token(pre, T)


def test_every_op_has_its_term():
    base = preset("prenorm-tiny", scale_embedding=False)
    d, f, L = base.d_model, base.d_ffn, base.n_layer
    flops = training_flops_breakdown(base, 64)
    assert sum(flops.values()) == training_flops_per_token(base, 64)
    assert all(v >= 0 for v in flops.values())

    def extra(**change) -> dict[str, float]:
        changed = training_flops_breakdown(base.replace(**change), 64)
        return {k: changed[k] - flops[k] for k in flops if changed[k] != flops[k]}

    assert extra(scale_resids=True) == {"res_scale": TRAINING_PASSES * MUL * L * d}
    assert extra(scale_embedding=True) == {"embedding": TRAINING_PASSES * MUL * d}
    assert extra(embedding_norm=True) == {"layer_norms": TRAINING_PASSES * LN * d}
    assert extra(final_norm=False) == {"layer_norms": -TRAINING_PASSES * LN * d}
    relu2, gelu = FLOPS_PER_ELEMENT["relu_squared"], FLOPS_PER_ELEMENT["gelu"]
    assert extra(activation="relu_squared") == {"activation": TRAINING_PASSES * (relu2 - gelu) * L * f}
    # the attention softmax grows with the keys each query sees, as the attention matmuls do
    longer = training_flops_breakdown(base, 128)
    assert longer["attention_softmax"] == 2 * flops["attention_softmax"] > 0


def test_elementwise_ops_are_a_small_share_at_the_papers_size():
    flops = training_flops_breakdown(preset("normformer-125M"), 2048)
    matmuls = flops["weight_matmuls"] + flops["attention_matmuls"]
    elementwise = sum(flops.values()) - matmuls
    assert 0.005 < elementwise / matmuls < 0.05


@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
def test_norm_schemes_cost_their_ops(size):
    """LayerNorm Scaling multiplies both pre-sub-layer norms' outputs (its own term); Mix-LN's Post-LN
    blocks hold as many norms as Pre-LN's (the same count); Peri-LN is sandwich's count; DyT is charged
    per element as its ops are (α multiply, tanh, gain, bias) in place of each norm."""
    T = 512
    pre = preset(f"prenorm-{size}")
    d, L = pre.d_model, pre.n_layer
    base = training_flops_breakdown(pre, T)

    def extra(arch: str, **overrides) -> dict[str, float]:
        changed = training_flops_breakdown(preset(f"{arch}-{size}", **overrides), T)
        return {k: changed[k] - base[k] for k in base if changed[k] != base[k]}

    assert extra("lnscaling") == {"ln_scaling": TRAINING_PASSES * MUL * 2 * d * L}
    assert extra("mixln") == {}
    post = preset(f"mixln-{size}").post_ln_layers
    assert extra("mixln", ln_scaling=True) == {"ln_scaling": TRAINING_PASSES * MUL * 2 * d * (L - post)}
    assert extra("periln") == extra("sandwich") == {"layer_norms": TRAINING_PASSES * LN * 2 * d * L}
    dyt = training_flops_breakdown(preset(f"dyt-{size}"), T)
    norm_elements = L * 2 * d + d  # two per block, the final norm
    assert dyt["layer_norms"] == TRAINING_PASSES * FLOPS_PER_ELEMENT["dyt"] * norm_elements
    assert {k for k in dyt if dyt[k] != base[k]} <= {"layer_norms"}
    assert sum(dyt.values()) == training_flops_per_token(preset(f"dyt-{size}"), T)
