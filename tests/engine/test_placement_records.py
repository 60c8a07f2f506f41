"""A norm placement is one record (config.PLACEMENTS): the Block builds its norms and residual scales
from it and flops.py counts them from it, so the FLOP count of every placement is the count of what the
model holds; a placement or norm kind added without what the count needs fails here."""

from __future__ import annotations

import pytest
from torch import nn

from nfeval.engine.model.config import NORM_POSITIONS, NORMS, PLACEMENTS, preset
from nfeval.engine.model.flops import FLOPS_PER_ELEMENT, NORM_FLOPS, TRAINING_PASSES, training_flops_breakdown
from nfeval.engine.model.model import Transformer
from nfeval.engine.model.norms import DynamicErf, DynamicTanh


def test_every_placement_and_norm_kind_is_declared_for_the_count():
    assert set(PLACEMENTS) == set(NORM_POSITIONS) and set(NORM_FLOPS) == set(NORMS)
    assert all(kind in FLOPS_PER_ELEMENT for kind in NORM_FLOPS.values())
    for name, p in PLACEMENTS.items():
        # every block normalises somewhere: with norm layers, or on the hypersphere (nGPT: its own count,
        # test_ngpt.py)
        assert (p.norms_per_block >= 1 or p.hypersphere) and p.name, name


def _norm_elements(model: nn.Module) -> int:
    """Returns the features the model's norms normalise per token (each norm module applied once)."""
    dims = {nn.LayerNorm: lambda m: m.normalized_shape[0], nn.RMSNorm: lambda m: m.normalized_shape[0]}
    dims[DynamicTanh] = dims[DynamicErf] = lambda m: m.dim
    return sum(dims[type(m)](m) for m in model.modules() if type(m) in dims)


# every placement with norm layers (not nGPT's), with NormFormer's FFN norm, and Mix-LN (Post-LN blocks in
# Pre-LN's, its only host)
LAYERED = [p for p in NORM_POSITIONS if not PLACEMENTS[p].hypersphere]
CASES = [(p, {}) for p in LAYERED] + [(p, {"scale_fc": True}) for p in LAYERED]
CASES.append(("pre", {"mix_ln_fraction": 0.5}))
CASES.append(("hybrid", {"qkv_norm": True, "first_block_prenorm": True}))  # HybridNorm*: one Pre-LN block


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("placement,extra", CASES, ids=[f"{p}-{'+'.join(e)}" for p, e in CASES])
def test_the_count_is_what_the_model_builds(placement, norm, extra):
    cfg = preset("prenorm-tiny", norm_position=placement, norm=norm, n_layer=4, **extra)
    model = Transformer(cfg)
    flops = training_flops_breakdown(cfg, 64)
    cost, mul = FLOPS_PER_ELEMENT[NORM_FLOPS[norm]], FLOPS_PER_ELEMENT["multiply"]
    assert flops["layer_norms"] == TRAINING_PASSES * cost * _norm_elements(model)
    alphas = sum(block.alpha is not None for block in model.blocks)
    assert flops["res_scale"] == TRAINING_PASSES * mul * 2 * cfg.d_model * alphas
    if PLACEMENTS[placement].attn_norm_before:  # LayerNorm Scaling: both norms of each block that has them
        scaled = cfg.replace(ln_scaling=True)
        before = sum(block.ln_scale is not None for block in Transformer(scaled).blocks)
        count = training_flops_breakdown(scaled, 64)["ln_scaling"]
        assert count == TRAINING_PASSES * mul * 2 * cfg.d_model * before
