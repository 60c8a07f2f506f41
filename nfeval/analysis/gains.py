"""Learned NormFormer gains by layer: the paper's Figures 4 and 6.

Per layer: the mean γ of the FFN LayerNorm (``ffn_hidden_norm``, fairseq ``ffn_layernorm``) and of
the post-attention LayerNorm (``attn_out_norm``, fairseq ``attn_ln``), the HeadScale gain of every
head (``head_gain``, fairseq ``c_attn``) and, with ResScale, the mean λ_resid (``resid_gain``,
fairseq ``w_resid``). The values are read from the stored weights (HeadScale is never folded here).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..base.errors import CheckpointError


def read_gains(model: nn.Module, source: str) -> dict[str, Any]:
    """Returns {ffn_ln_mean, attn_ln_mean, resid_gain_mean: per-layer floats or None when the op is off,
    head_gain: per-layer lists of per-head gains or None}; CheckpointError if the model has none."""
    cfg = model.cfg
    if not (cfg.scale_attn or cfg.scale_fc or cfg.scale_heads or cfg.scale_resids):
        raise CheckpointError(
            f"{source}: has no NormFormer gains (architecture {cfg.architecture}: no attn_ln, "
            "ffn_layernorm, c_attn or w_resid); `nfeval analyze gains` needs a NormFormer checkpoint"
        )

    def per_layer(get) -> list[Any] | None:
        tensors = [get(block) for block in model.blocks]
        return None if tensors[0] is None else tensors

    ffn = per_layer(lambda b: b.ffn_hidden_norm.weight if b.ffn_hidden_norm is not None else None)
    attn = per_layer(lambda b: b.attn_out_norm.weight if b.attn_out_norm is not None else None)
    heads = per_layer(lambda b: b.attn.head_gain)
    resid = per_layer(lambda b: b.resid_gain)
    return {
        "ffn_ln_mean": None if ffn is None else [float(t.detach().float().mean()) for t in ffn],
        "attn_ln_mean": None if attn is None else [float(t.detach().float().mean()) for t in attn],
        "head_gain": None if heads is None else [t.detach().float().tolist() for t in heads],
        "resid_gain_mean": None if resid is None else [float(t.detach().float().mean()) for t in resid],
    }
