"""The norms of the model and DeepNorm's constants: one factory for every norm (LayerNorm, torch's
RMSNorm, DyT or Derf), DeepNet's α and β for a decoder, its init, and the λresid gains."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig


class PointwiseNorm(nn.Module):
    """The parameters of a point-wise function in place of a norm: α, one learned scalar drawn at
    ``alpha_init``, and, with ``affine`` (``norm_affine``), a gain γ (init 1) and a bias β (init 0) per
    channel. A subclass's ``forward`` is γ·f(x) + β (``affine``)."""

    def __init__(self, dim: int, alpha_init: float, affine: bool = True):
        super().__init__()
        self.dim, self.alpha_init = dim, alpha_init
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine else None

    def affine(self, y: torch.Tensor) -> torch.Tensor:
        """Returns γ·y + β, or ``y`` without ``affine``."""
        return y if self.weight is None else y * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.dim}, alpha_init={self.alpha_init}, affine={self.weight is not None}"


class DynamicTanh(PointwiseNorm):
    """DyT (Zhu, Chen, He, LeCun & Liu, "Transformers without Normalization", CVPR 2025): γ·tanh(α·x) + β
    elementwise, in place of a norm. α is one learned scalar, drawn at ``alpha_init`` (the paper's α0);
    γ (init 1) and β (init 0) are per channel, as the paper's ``DynamicTanh`` (its LLaMA code keeps γ only,
    as LLaMA's RMSNorm has no bias; nfeval keeps β, the paper's equation and LayerNorm's parameters).
    ``affine=False`` (``norm_affine``): tanh(α·x) with α still learned."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.affine(torch.tanh(self.alpha * x))


class DynamicErf(PointwiseNorm):
    """Derf (Chen, Lu, Zhu, Sun & Liu, "Stronger Normalization-Free Transformers", 2025): γ·erf(α·x + s) + β
    elementwise, in place of a norm, erf the Gauss error function. The paper writes α and s without saying
    whether they are scalars or per channel; the authors' code (``Dynamic_erf``, zlab-princeton/Derf) makes
    each one learned scalar, as here: α drawn at ``alpha_init`` (their default 0.5), s at 0; γ (init 1)
    and β (init 0) per channel, as DyT's. ``affine=False`` (``norm_affine``): erf(α·x + s), α and s still
    learned."""

    def __init__(self, dim: int, alpha_init: float, affine: bool = True):
        super().__init__(dim, alpha_init, affine)
        self.shift = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.affine(torch.erf(self.alpha * x + self.shift))


def make_norm(cfg: ModelConfig, dim: int, kind: str | None = None, attention: bool = False) -> nn.Module:
    """Returns a norm over the last ``dim`` features: LayerNorm, torch's RMSNorm, DyT or Derf, as ``kind``
    (default ``cfg.norm``) says, with a learned gain (and every bias but RMSNorm's) when
    ``cfg.norm_affine``. A DyT's or Derf's α starts at ``cfg.dyt_alpha_attn`` for a norm of the attention
    sub-layer (``attention``: its input, q/k/v and output norms) and at ``cfg.dyt_alpha_other`` elsewhere
    (the FFN sub-layer's, the embedding, final and MLM-head norms), as DyT's LLaMA recipe and Derf's GPT-2
    code split them."""
    kind = kind or cfg.norm
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=cfg.layer_norm_eps, elementwise_affine=cfg.norm_affine)
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=cfg.layer_norm_eps, elementwise_affine=cfg.norm_affine)
    pointwise = {"dyt": DynamicTanh, "derf": DynamicErf}
    if kind in pointwise:
        alpha = cfg.dyt_alpha_attn if attention else cfg.dyt_alpha_other
        return pointwise[kind](dim, alpha, affine=cfg.norm_affine)
    raise ValueError(f"unknown norm {kind!r}")


def ln_scale(cfg: ModelConfig, layer: int) -> float | None:
    """Returns LayerNorm Scaling's factor 1/√ℓ for the block at 0-based index ``layer`` (ℓ = layer + 1,
    Sun et al. 2025, "The Curse of Depth in Large Language Models"), or None when ``cfg.ln_scaling`` is
    off."""
    return (layer + 1) ** -0.5 if cfg.ln_scaling else None


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
