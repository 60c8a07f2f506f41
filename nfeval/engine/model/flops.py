"""Model FLOPs per trained token, op by op (ModelConfig x sequence length); MFU and every equal-FLOPs
reading use this count."""

from __future__ import annotations

from .config import PLACEMENTS, ModelConfig

# Forward FLOPs per element of each op that is not a matmul. Training counts every op 3x its forward
# (backward ~ 2x forward), the convention of the 6N matmul count, so a term is 3 x forward.
FLOPS_PER_ELEMENT = {
    "layer_norm": 7,  # mean, subtract it, square, variance sum, normalise, gain, bias (rsqrt per row: 0)
    "rms_norm": 4,  # square, sum, normalise, gain
    "dyt": 7,  # DyT γ·tanh(α·x) + β: α multiply, tanh (counted 4), gain, bias
    "derf": 8,  # Derf γ·erf(α·x + s) + β: α multiply, s add, erf (counted 4), gain, bias
    "gelu": 8,  # exact 0.5x(1 + erf(x/sqrt 2)): divide, erf (counted 4), add, two multiplies
    "gelu_tanh": 12,  # GPT-2's 0.5x(1 + tanh(k(x + c·x³))): six multiplies, two adds, tanh (counted 4)
    "relu_squared": 2,  # max, multiply
    "silu": 5,  # x·σ(x): negate, exp, add 1, divide, multiply
    "softmax": 5,  # max, subtract it, exp, sum, divide (the loss's log-softmax: log instead of divide)
    "sigmoid": 4,  # negate, exp, add 1, divide (the attention gate)
    "l2_norm": 3,  # nGPT's x / ‖x‖: square, sum, divide (the root per row: 0)
    "interpolate": 3,  # nGPT's h + |α|·(y - h): subtract, multiply, add
    "multiply": 1,  # HeadScale, ResScale, the sqrt(d) embedding scale, attention's 1/sqrt(head_dim),
    # LayerNorm Scaling's 1/sqrt(ℓ)
    "add": 1,  # residual, bias and position additions
}
# The entry of FLOPS_PER_ELEMENT that each norm kind (config.NORMS) costs.
NORM_FLOPS = {"layernorm": "layer_norm", "rmsnorm": "rms_norm", "dyt": "dyt", "derf": "derf"}
TRAINING_PASSES = 3  # forward + backward
# What the FLOP count (and so every "equal FLOPs" reading) counts, for tables to state.
FLOPS_COUNTED = (
    "FLOPs = forward + backward (3x forward) of the weight and attention matmuls and of every "
    "elementwise op: norms (NormFormer's, sandwich, QK-norm, V-norm, DyT, Derf included), HeadScale, "
    "ResScale, LayerNorm Scaling, activation, GeGLU gate, attention gate, softmax, "
    "embedding scale, residual/bias adds, nGPT's L2 norms, steps and scalings, loss "
    "(nfeval.engine.model.flops.training_flops_breakdown)"
)


def training_flops_breakdown(
    cfg: ModelConfig, seq_len: int, masked_fraction: float = 0.15
) -> dict[str, float]:
    """Returns training FLOPs per trained token by op ({op: FLOPs}; their sum is the model's count).

    ``weight_matmuls`` is 6·N over the matmul weights (blocks plus the tied output projection, once);
    ``attention_matmuls`` 12·L·d·T (QKᵀ and AV against all T keys, as PaLM/nanoGPT count them); the
    other terms are ``FLOPS_PER_ELEMENT`` × elements × ``TRAINING_PASSES``. A masked LM runs its head
    (dense d×d, GELU, LayerNorm, output projection, loss) only on the masked positions, a
    ``masked_fraction`` of the tokens (RoBERTa's 15%, as ``data.mask_tokens`` draws them). Dropout
    (a mask multiply, off in the presets) is not counted. A new op adds its term here; a new placement
    is counted from its record (``config.PLACEMENTS``: the norms and residual scales the Block builds
    from the same record). A DyT or Derf costs as a norm does (``layer_norms``, at its own entry of
    ``FLOPS_PER_ELEMENT``);
    Mix-LN's Post-LN blocks hold two norms each, as Pre-LN's do, so Mix-LN costs what Pre-LN costs. The
    attention gate's d × g weight is a matmul weight (g gate values per token: ``attn_gate_width``); its
    sigmoid (g per token), product with the attention output (d) and bias (g) are its own term. nGPT has
    no norm layer, bias or residual add: its own terms are ``ngpt_terms``'.
    """
    d, f, L, T, V = cfg.d_model, cfg.d_ffn, cfg.n_layer, seq_len, cfg.vocab_size
    e, mlm = FLOPS_PER_ELEMENT, not cfg.causal
    norm_cost = e[NORM_FLOPS[cfg.norm]]
    head = masked_fraction if mlm else 1.0  # the share of tokens that run the LM head and loss
    # each block's placement (Mix-LN's first blocks "post"), as the model builds it (config.PLACEMENTS)
    blocks = [PLACEMENTS[cfg.layer_placement(layer)] for layer in range(L)]
    norm_elements = (
        d * sum(p.norms_per_block for p in blocks)  # the placement's norms of both sub-layers
        + L * (d * cfg.scale_attn + f * cfg.scale_fc)  # NormFormer's two
        + L * d * (2 * cfg.qk_norm + cfg.v_norm + 3 * cfg.qkv_norm)  # per head: q, k; v; over d: q, k, v
        + d * bool(cfg.final_norm)
        + d * cfg.embedding_norm
        + head * d * mlm  # the MLM head's LayerNorm
    )
    glu = cfg.ffn_glu  # GeGLU: fc1 is twice as wide; the gate multiplies
    g = cfg.attn_gate_width  # the attention gate's values per token (0: none)
    # λresid on every block's residual(s); DeepNorm's α on both residuals of each block that has it
    resid_gains = L * (cfg.scale_resids + cfg.scale_resids_attn) + 2 * sum(p.residual_alpha for p in blocks)
    pre_norm_layers = sum(p.norm_before for p in blocks)  # LayerNorm Scaling scales the norms before
    forward = {
        "weight_matmuls": 2 * (L * (4 * d * d + d * g + (2 + glu) * d * f) + head * (V * d + d * d * mlm)),
        "attention_matmuls": 2 * 2 * L * d * T,
        "attention_softmax": L * cfg.n_head * T * (e["softmax"] + e["multiply"]),
        "layer_norms": norm_cost * norm_elements,
        "head_scale": e["multiply"] * L * d * cfg.scale_heads,
        "res_scale": e["multiply"] * d * resid_gains,  # λresid (either residual), DeepNorm's α
        "ln_scaling": e["multiply"] * 2 * d * pre_norm_layers * cfg.ln_scaling,  # 1/sqrt(ℓ) on both norms
        "glu_gate": e["multiply"] * L * f * glu,
        "attn_gate": L * ((e["sigmoid"] + e["add"]) * g + e["multiply"] * d * bool(g)),  # σ(xW + b) ⊙ y
        "activation": e[cfg.activation] * L * f + e["gelu"] * head * d * mlm,
        "embedding": e["multiply"] * d * cfg.scale_embedding + e["add"] * d,  # scale, position add
        # per layer: 2 residual adds, biases of qkv (3d), out_proj, fc1, fc2; the MLM head's two biases
        "adds": e["add"] * (L * (7 * d + f) * (not cfg.ngpt) + head * (d + V) * mlm),
        "loss_softmax": e["softmax"] * head * V,
        **ngpt_terms(cfg),
    }
    return {op: TRAINING_PASSES * float(v) for op, v in forward.items()}


def ngpt_terms(cfg: ModelConfig) -> dict[str, float]:
    """Returns nGPT's forward FLOPs per token (0 for the other schemes): ``hypersphere``, its L2 norms (the
    input, and per block q, k, Norm(f(h)) and the step's Norm of each sub-layer: 6·d) and its two steps
    h + |α|·(y - h) per block; ``ngpt_scales``, s_qk on q and k, s_u and s_ν·√d on fc1's output, and s_z
    on the logits (counted per token as the paper writes it; nfeval folds it into the output projection's
    weight). The re-normalisation of the weights after each update, per step and not per token, is not
    counted."""
    e, d, f, L = FLOPS_PER_ELEMENT, cfg.d_model, cfg.d_ffn, cfg.n_layer
    on = cfg.ngpt
    return {
        "hypersphere": on * (e["l2_norm"] * d * (1 + 6 * L) + e["interpolate"] * 2 * L * d),
        "ngpt_scales": on * e["multiply"] * (L * (2 * d + (1 + cfg.ffn_glu) * f) + cfg.vocab_size),
    }


def training_flops_per_token(cfg: ModelConfig, seq_len: int, masked_fraction: float = 0.15) -> float:
    """Returns model FLOPs per trained token: the sum of ``training_flops_breakdown``'s terms."""
    return sum(training_flops_breakdown(cfg, seq_len, masked_fraction).values())
