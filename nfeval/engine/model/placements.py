"""The norm placements of the one Block and the norm kinds: each placement a record that the Block builds
its norms from and ``flops.py`` counts them from, so a placement is declared once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a block's main norms sit (the op order in model.py): what the Block builds and what
    ``flops.py`` counts, both read from here, so a placement is declared once."""

    name: str  # the architecture name, for configs that match no preset (``prenorm+scale_attn``)
    norm_before: bool = False  # a norm on each sub-layer's input: x + f(N(x))
    norm_after_sublayer: bool = False  # a norm on each sub-layer's output: x + N(f(x))
    norm_after_add: bool = False  # a norm on the residual stream after each add: N(x + f(x))
    residual_alpha: bool = False  # DeepNorm's α scales both sub-layers' residuals: N(α·x + f(x))
    # HybridNorm (Zhuo et al. 2025), read with norm_before: the attention sub-layer without its input norm
    # (its q, k and v are normalised inside: ``qkv_norm``), and the FFN's residual taken after its input
    # norm, N(x) + f(N(x)) (the authors' OLMo config: attn_norm false, ffn_residual_after_norm true)
    attn_input_norm: bool = True
    ffn_residual_after_norm: bool = False
    # nGPT (Loshchilov et al. 2025): no norm layers; the residual stream on the unit hypersphere, each
    # sub-layer h <- Norm(h + |α|·(Norm(f(h)) - h)) with nGPT's scalings (``ngpt.py``)
    hypersphere: bool = False
    # the training-recipe fields (TrainConfig names) a model of this placement trains under unless the run
    # sets them: nGPT's no weight decay and no warm-up (its train.py: weight_decay 0.0, warmup_iters 0)
    recipe: tuple[tuple[str, float], ...] = ()

    @property
    def attn_norm_before(self) -> bool:
        """Whether the attention sub-layer's input is normalised (x + f(N(x)))."""
        return self.norm_before and self.attn_input_norm

    @property
    def norms_per_block(self) -> int:
        """Returns the d-wide norms of one block (both sub-layers), those inside attention not counted."""
        return self.attn_norm_before + self.norm_before + 2 * (self.norm_after_sublayer + self.norm_after_add)

    @property
    def final_norm(self) -> bool:
        """Whether the model gets a final norm by default: a block that ends with a norm on the residual
        stream, or keeps it on the hypersphere, needs none."""
        return not (self.norm_after_add or self.hypersphere)


# Pre-LN, Post-LN, Gemma 2's sandwich, OLMo 2's norm on each sub-layer's output only, DeepNet's
# DeepNorm (Post-LN with α and β), and HybridNorm's order (x + attn(x), then y = N(x), y + FFN(y)), named
# "hybridorder" alone: HybridNorm itself (the preset ``hybridnorm``) adds its QKV-Norm, ``qkv_norm``;
# and nGPT's normalised Transformer, which has no norm layer at all.
PLACEMENTS = {
    "pre": Placement(name="prenorm", norm_before=True),
    "post": Placement(name="postnorm", norm_after_add=True),
    "sandwich": Placement(name="sandwich", norm_before=True, norm_after_sublayer=True),
    "olmo2": Placement(name="olmo2norm", norm_after_sublayer=True),
    "deepnorm": Placement(name="deepnorm", norm_after_add=True, residual_alpha=True),
    "hybrid": Placement(
        name="hybridorder", norm_before=True, attn_input_norm=False, ffn_residual_after_norm=True
    ),
    "ngpt": Placement(name="ngpt", hypersphere=True, recipe=(("weight_decay", 0.0), ("warmup", 0.0))),
}
NORM_POSITIONS = tuple(PLACEMENTS)
FINAL_NORM_POSITIONS = tuple(k for k, p in PLACEMENTS.items() if p.final_norm)
PLACEMENT_NAMES = {k: p.name for k, p in PLACEMENTS.items()}
# LayerNorm, torch's RMSNorm, DyT (γ·tanh(α·x) + β, Zhu et al. 2025: ``norms.DynamicTanh``) or Derf
# (γ·erf(α·x + s) + β, Chen et al. 2025: ``norms.DynamicErf``)
NORMS = ("layernorm", "rmsnorm", "dyt", "derf")
POINTWISE_NORMS = ("dyt", "derf")  # the kinds with a learned α, whose α0 the dyt_alpha_* fields set
DYT_ALPHAS = ("dyt_alpha_attn", "dyt_alpha_other")
DYT_ALPHA_DEFAULT = 0.5  # the DyT and Derf papers' α0 wherever they do not tune it (ModelConfig's default)
