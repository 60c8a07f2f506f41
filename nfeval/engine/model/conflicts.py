"""The combinations of ``ModelConfig`` fields that make no sense, each refused naming both fields
(``ModelConfig.validate`` calls ``conflicting_flags``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .placements import DYT_ALPHA_DEFAULT, DYT_ALPHAS, POINTWISE_NORMS

# The fields that add a norm, a gain or a gate that nGPT's normalised Transformer has no place for
NGPT_REFUSED = (
    "scale_attn", "scale_fc", "scale_heads", "scale_resids", "scale_resids_attn", "qk_norm", "qkv_norm",
    "v_norm", "attn_gate", "embedding_norm", "final_norm",
)  # fmt: skip

if TYPE_CHECKING:
    from .config import ModelConfig


def conflicting_flags(cfg: ModelConfig) -> str | None:
    """Returns why two flags cannot be combined (naming both), or None when the combination is sound."""
    placement = f"norm_position={cfg.norm_position!r}"
    if cfg.scale_attn and cfg.placement.norm_after_sublayer:
        return f"scale_attn=True with {placement}: that placement already normalises the attention output"
    resids = [f for f in ("scale_resids", "scale_resids_attn") if getattr(cfg, f)]
    if resids and cfg.placement.residual_alpha:
        return (
            f"{resids[0]}=True with {placement}: DeepNorm fixes the residual scale (α) that a "
            "learned λresid would replace"
        )
    if cfg.ffn_glu and cfg.scale_fc:
        return "ffn_glu=True with scale_fc=True: Table 4's GeGLU control replaces the FFN LayerNorm"
    if cfg.resid_scale_scalar and not resids:
        return "resid_scale_scalar=True needs scale_resids=True or scale_resids_attn=True"
    if cfg.qkv_norm and cfg.qk_norm:
        return "qkv_norm=True with qk_norm=True: both normalise the queries and keys"
    if cfg.qkv_norm and cfg.v_norm:
        return "qkv_norm=True with v_norm=True: both normalise the values"
    if cfg.normformer_norm is not None and not (cfg.scale_attn or cfg.scale_fc or cfg.qkv_norm):
        return (
            f"normformer_norm={cfg.normformer_norm!r} without scale_attn, scale_fc or qkv_norm: "
            "there is no extra norm for it to shape"
        )
    return scheme_conflict(cfg) or ngpt_conflict(cfg)


def scheme_conflict(cfg: ModelConfig) -> str | None:
    """Returns why a 2024–2025 scheme's field cannot go with the others (naming both), or None."""
    placement = f"norm_position={cfg.norm_position!r}"
    if cfg.mix_ln_fraction and cfg.norm_position != "pre":
        return (
            f"mix_ln_fraction={cfg.mix_ln_fraction!r} with {placement}: Mix-LN mixes Post-LN "
            "blocks into Pre-LN"
        )
    if cfg.first_block_prenorm and cfg.norm_position != "hybrid":
        return (
            f"first_block_prenorm=True with {placement}: HybridNorm*'s first Pre-LN block is for a "
            "HybridNorm model (norm_position='hybrid')"
        )
    if cfg.ln_scaling and not cfg.placement.attn_norm_before:
        return (
            f"ln_scaling=True with {placement}: LayerNorm Scaling scales the norms before each "
            "sub-layer, which that placement has not"
        )
    alphas = [f"{f}={getattr(cfg, f)!r}" for f in DYT_ALPHAS if getattr(cfg, f) != DYT_ALPHA_DEFAULT]
    if alphas and not set(POINTWISE_NORMS) & {cfg.norm, cfg.normformer_norm}:
        return (
            f"{alphas[0]} without a DyT or Derf norm (norm or normformer_norm 'dyt' or 'derf'): there "
            "is no α for it to set"
        )
    return None


def ngpt_conflict(cfg: ModelConfig) -> str | None:
    """Returns why a field cannot go with nGPT (``norm_position="ngpt"``, naming both), or None."""
    if not cfg.ngpt:
        return None
    placement = f"norm_position={cfg.norm_position!r}"
    if cfg.objective != "clm":
        return f"objective={cfg.objective!r} with {placement}: nGPT is a causal LM (no MLM head)"
    on = [f"{f}={getattr(cfg, f)!r}" for f in NGPT_REFUSED if getattr(cfg, f)]
    if on:
        return (
            f"{on[0]} with {placement}: nGPT has no norm layers; its hidden states, q and k are "
            "L2-normalised, and it has no place for that norm, gain or gate"
        )
    if cfg.norm != "layernorm":
        return f"norm={cfg.norm!r} with {placement}: nGPT has no norm layer for it to be"
    return None
