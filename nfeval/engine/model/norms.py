"""The norms of the model and DeepNorm's constants: one factory for every norm (LayerNorm or torch's
RMSNorm), DeepNet's α and β for a decoder, its init, and the λresid gains."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig


def make_norm(cfg: ModelConfig, dim: int, kind: str | None = None) -> nn.Module:
    """Returns a norm over the last ``dim`` features: LayerNorm or torch's RMSNorm, as ``kind`` (default
    ``cfg.norm``) says, with a learned gain (and LayerNorm's bias) when ``cfg.norm_affine``."""
    kind = kind or cfg.norm
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=cfg.layer_norm_eps, elementwise_affine=cfg.norm_affine)
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=cfg.layer_norm_eps, elementwise_affine=cfg.norm_affine)
    raise ValueError(f"unknown norm {kind!r}")


def deepnorm_alpha_beta(n_layer: int) -> tuple[float, float]:
    """Returns DeepNet's (α, β) for a decoder of ``n_layer`` layers: α = (2N)^(1/4), β = (8N)^(-1/4)."""
    return (2 * n_layer) ** 0.25, (8 * n_layer) ** -0.25


def resid_gain(cfg: ModelConfig) -> nn.Parameter:
    """Returns a λresid gain at 1: one per channel, or one scalar when ``cfg.resid_scale_scalar``."""
    return nn.Parameter(torch.ones(1 if cfg.resid_scale_scalar else cfg.d_model))


@torch.no_grad()
def deepnorm_init_(model: nn.Module) -> None:
    """Re-initialises the block weights as DeepNet does (its Figure 2): Xavier-normal with gain β for
    fc1, fc2, the value projection and out_proj, gain 1 for the query and key projections. ``model``: a
    ``Transformer`` just initialised; the Transformer calls this after its own init."""
    beta = deepnorm_alpha_beta(model.cfg.n_layer)[1]
    for block in model.blocks:
        q, k, v = block.attn.qkv.weight.chunk(3)  # views: each a d×d projection
        for weight, gain in ((q, 1.0), (k, 1.0), (v, beta), (block.attn.out_proj.weight, beta)):
            nn.init.xavier_normal_(weight, gain=gain)
        for weight in (block.fc1.weight, block.fc2.weight):
            nn.init.xavier_normal_(weight, gain=beta)
