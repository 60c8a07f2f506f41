"""One Transformer for every norm placement, NormFormer and its controls (causal decoder or encoder).

The block follows fairseq's ``transformer_layer.py``; each variant is a config flag and each optional op
a module that is ``None`` when off, applied in this fixed order (``norm(...)``: ``make_norm``, a
LayerNorm, an RMSNorm, a DyT or a Derf as ``cfg.norm`` says; NormFormer's extra norms follow
``cfg.normformer_norm``). The placement is ``cfg.norm_position``'s, except in Mix-LN's first
``cfg.post_ln_layers`` blocks, which are "post", and HybridNorm*'s first, "pre" (``cfg.layer_placement``):

    residual = x
    x = attn_norm(x)                     if pre / sandwich   (fairseq self_attn_layer_norm; not hybrid)
    x = x / sqrt(ℓ)                      if ln_scaling       (LayerNorm Scaling; ℓ the 1-based layer)
    q, k, v = split(qkv(x))
    q, k, v = query_norm(q), key_norm(k), value_norm(v)   if qkv_norm  (Table 4: "three more LayerNorms")
    q, k = q_head_norm(q), k_head_norm(k) (each head, over head_dim)   if qk_norm
    v = v_head_norm(v) (each head, over head_dim)   if v_norm   (with qk_norm: HybridNorm's QKV-Norm)
    (the KV cache stores k and v from here on)
    y = attention(q, k, v)
    y = y * σ(gate(x))                   if attn_gate        (Qiu et al. 2025; x this sub-layer's input)
    x = out_proj(y)
    x = x * head_gain (per head)         if scale_heads      (fairseq c_attn; after or before out_proj)
    x = attn_out_norm(x)                 if scale_attn       (fairseq attn_ln)
    x = attn_post_norm(x)                if sandwich / olmo2 (Gemma 2 post_attention_norm)
    residual = attn_resid_gain * residual    if scale_resids_attn  (Table 4: λresid on the other residual)
    residual = alpha * residual          if deepnorm         (α = (2N)^(1/4))
    x = residual + dropout(x)            or, if ngpt: x = Norm(residual + |α_A|·(Norm(x) - residual))
    x = attn_norm(x)                     if post / deepnorm
    residual = x
    x = ffn_norm(x)                      if pre / sandwich / hybrid   (fairseq final_layer_norm)
    residual = x                         if hybrid           (HybridNorm's N(x) + f(N(x)))
    x = x / sqrt(ℓ)                      if ln_scaling
    x = fc1(x) · [s_ν·√d, s_u]           if ngpt             (nGPT's FFN scalings; ν = a, u = b)
    x = activation(fc1(x))               or, if ffn_glu: a, b = split(fc1(x)); x = activation(a) * b
    x = ffn_hidden_norm(x)               if scale_fc         (fairseq ffn_layernorm)
    x = fc2(x)
    x = ffn_post_norm(x)                 if sandwich / olmo2 (Gemma 2 post_feedforward_norm)
    residual = resid_gain * residual     if scale_resids     (fairseq w_resid)
    residual = alpha * residual          if deepnorm
    x = residual + dropout(x)            or, if ngpt: x = Norm(residual + |α_M|·(Norm(x) - residual))
    x = ffn_norm(x)                      if post / deepnorm

nGPT (Loshchilov et al. 2025, ``ngpt.py``) has no norm layer: its input is Norm(embedding + position),
each head's q and k are Norm(q)·s_qk, Norm(k)·s_qk (``qk_scale``, before the KV cache) under softmax
scale √head_dim, its Linears have no bias, and its logits are scaled by s_z; ``normalize_weights`` keeps
its embedding and matrices on the hypersphere after each optimizer step.

So Pre-LN is x + f(LN(x)); Post-LN LN(x + f(x)); sandwich (Gemma 2; Peri-LN, Kim et al. 2025) x +
LN(f(LN(x))); olmo2 (OLMo 2) x + LN(f(x)); DeepNorm (DeepNet, Wang et al. 2022) LN(α·x + f(x)) with β-scaled
init (``norms.deepnorm_init_``); LayerNorm Scaling (Sun et al. 2025) x + f(LN(x)/sqrt(ℓ)); Mix-LN (Li et al.
2024) Post-LN blocks then Pre-LN ones; HybridNorm (Zhuo et al. 2025) x + f(x) with each head's q, k, v
normalised inside attention (``qk_norm``, ``v_norm``), then y + f(y) with y = N(x), and HybridNorm* its first
block Pre-LN (``first_block_prenorm``). DyT (Zhu et al. 2025) is a norm kind: every norm of that kind is
γ·tanh(α·x) + β (``norms.DynamicTanh``); so is Derf (Chen et al. 2025), γ·erf(α·x + s) + β
(``norms.DynamicErf``). A λresid gain is one per channel, or one scalar with ``resid_scale_scalar``. The final
norm (after the last block) is on by default for pre / sandwich / olmo2 / hybrid (Mix-LN and HybridNorm*
included) and off for post / deepnorm, whose blocks already end with a norm.

Padding is expected on the right; for a causal model the causal mask already hides it.

Inference (``nfeval.engine.inference.generate``) passes three optional arguments to ``encode``/``forward``:
``cache`` (a ``KVCache``: each layer's keys and values of the tokens seen so far; the new tokens sit
after them), ``position_ids`` (per-row positions, e.g. for left-padded prompts) and ``attn_mask``
(True where a query may attend a key, or the 0 / -inf SDPA adds to the scores; it replaces the causal
mask). Without them the training forward runs SDPA with ``is_causal``.

The attention sub-layer (from ``qkv`` to HeadScale above) is ``attention.py``'s ``SelfAttention``. The
model is plain torch (``nn.Linear``, ``F.linear``), as an export carries it; where nfeval trains or
scores it, ``engine.fast.cpu_linear.convert`` swaps its CPU kernel in after the model is built.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .activations import activation_fn
from .attention import SelfAttention
from .config import PLACEMENTS, ModelConfig
from .initialisation import init_weights
from .kv_cache import KVCache, LayerCache
from .ngpt import FFNScale, HypersphereStep, logit_scale, renormalize, unit
from .norms import deepnorm_alpha_beta, ln_scale, make_norm, resid_gain


def sinusoidal_table(num_positions: int, dim: int, padding_idx: int) -> torch.Tensor:
    """Returns fairseq's sinusoidal position table (``num_positions`` × ``dim``), row ``padding_idx`` zero."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(num_positions, dtype=torch.float)[:, None] * freq[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[padding_idx] = 0
    return table


class Block(nn.Module):
    """One layer, the ``layer``-th (0-based); which norms exist and where they apply follows ``cfg`` (the op
    order above)."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        d, f, extra = cfg.d_model, cfg.d_ffn, cfg.normformer_norm
        placement = PLACEMENTS[cfg.layer_placement(layer)]  # what this block's norms are (config.py)
        self.norm_before, self.norm_after_add = placement.norm_before, placement.norm_after_add
        self.attn_norm_before = placement.attn_norm_before  # not HybridNorm's (its q, k, v are normalised)
        self.ffn_residual_after_norm = placement.ffn_residual_after_norm  # HybridNorm's N(x) + f(N(x))
        post_sublayer, main_norm = placement.norm_after_sublayer, self.norm_before or self.norm_after_add
        self.alpha = deepnorm_alpha_beta(cfg.n_layer)[0] if placement.residual_alpha else None
        self.ln_scale = ln_scale(cfg, layer) if self.norm_before else None
        attn_norm = self.attn_norm_before or self.norm_after_add
        self.attn_norm = make_norm(cfg, d, attention=True) if attn_norm else None
        self.attn = SelfAttention(cfg)
        self.attn_out_norm = make_norm(cfg, d, extra, attention=True) if cfg.scale_attn else None
        self.attn_post_norm = make_norm(cfg, d, attention=True) if post_sublayer else None
        self.attn_resid_gain = resid_gain(cfg) if cfg.scale_resids_attn else None
        self.attn_update, self.ffn_update = (
            (HypersphereStep(d) for _ in range(2)) if cfg.ngpt else (None,) * 2
        )
        self.ffn_norm = make_norm(cfg, d) if main_norm else None
        self.glu = cfg.ffn_glu
        self.fc1 = nn.Linear(d, 2 * f if cfg.ffn_glu else f, bias=not cfg.ngpt)
        self.ffn_scale = FFNScale(d, f, cfg.ffn_glu) if cfg.ngpt else None
        self.ffn_hidden_norm = make_norm(cfg, f, extra) if cfg.scale_fc else None
        self.fc2 = nn.Linear(f, d, bias=not cfg.ngpt)
        self.ffn_post_norm = make_norm(cfg, d) if post_sublayer else None
        self.resid_gain = resid_gain(cfg) if cfg.scale_resids else None
        self.act = activation_fn(cfg.activation)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
        queries: slice | None = None,
    ) -> torch.Tensor:
        """Returns the layer's output (B, T, d); with ``queries``, at those positions only (B,
        len(queries), d), every position still a key and value: every op after attention is per token."""
        residual = x if queries is None else x[:, queries]
        if self.attn_norm_before:
            x = self.scaled(self.attn_norm(x))
        x = self.attn(x, attn_mask, cache, queries)
        for norm in (self.attn_out_norm, self.attn_post_norm):
            if norm is not None:
                x = norm(x)
        x = self.add_residual(residual, x, self.attn_resid_gain, self.attn_update)
        if self.norm_after_add:
            x = self.attn_norm(x)

        residual = x
        if self.norm_before:
            x = self.scaled(self.ffn_norm(x))
            if self.ffn_residual_after_norm:
                residual = x
        x = self.feed_forward(x)
        if self.ffn_post_norm is not None:
            x = self.ffn_post_norm(x)
        x = self.add_residual(residual, x, self.resid_gain, self.ffn_update)
        if self.norm_after_add:
            x = self.ffn_norm(x)
        return x

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        """Returns a pre-sub-layer norm's output times LayerNorm Scaling's 1/sqrt(ℓ) where on."""
        return x if self.ln_scale is None else x * self.ln_scale

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns fc2(hidden) of the FFN: activation(fc1(x)), or GLU-gated, then the FFN LN if on."""
        x = self.fc1(x)
        if self.ffn_scale is not None:
            x = self.ffn_scale(x)
        if self.glu:
            gate, up = x.chunk(2, dim=-1)
            x = self.act(gate) * up
        else:
            x = self.act(x)
        if self.ffn_hidden_norm is not None:
            x = self.ffn_hidden_norm(x)
        return self.fc2(x)

    def add_residual(
        self, residual: torch.Tensor, x: torch.Tensor, gain: nn.Parameter | None, update: nn.Module | None
    ) -> torch.Tensor:
        """Returns residual (times λresid and DeepNorm's α where on) + dropout(x), or nGPT's step from
        residual towards Norm(dropout(x)) (``update``)."""
        if update is not None:
            return update(residual, self.dropout(x))
        if gain is not None:
            residual = residual * gain
        if self.alpha is not None:
            residual = residual * self.alpha
        return residual + self.dropout(x)


def embedding(num: int, dim: int, skeleton: bool) -> nn.Embedding:
    """Returns ``nn.Embedding(num, dim)``, without its own N(0, 1) draw for a ``skeleton`` (``init_weights``
    draws every embedding again anyway)."""
    return nn.Embedding(num, dim, _weight=torch.empty(num, dim)) if skeleton else nn.Embedding(num, dim)


class Transformer(nn.Module):
    """Token embedding, blocks, and the language-model head (tied; RoBERTa-style head for MLM)."""

    # the product of the tied output projection (the embedding's weight); a CPU kernel converter may
    # set another (``engine.fast.cpu_linear.convert``)
    linear = staticmethod(F.linear)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        # A checkpoint's skeleton (``checkpoint.read`` builds it on the meta device) computes and draws
        # nothing: there, a factory like ``arange`` or a ``normal_`` runs a Python decomposition that
        # imports torch._dynamo, 1.5 s of a command's start.
        skeleton = torch.get_default_device().type == "meta"
        self.tok_emb = embedding(cfg.vocab_size, d, skeleton)
        if cfg.positions == "learned":
            self.pos_emb = embedding(cfg.max_seq_len, d, skeleton)
        else:
            self.pos_emb = None
            self.register_buffer("sin_pos", torch.empty(cfg.max_seq_len, d), persistent=False)
        self.emb_scale = math.sqrt(d) if cfg.scale_embedding else 1.0
        self.emb_norm = make_norm(cfg, d) if cfg.embedding_norm else None
        self.emb_unit = unit if cfg.ngpt else None  # nGPT: h_0 = Norm(embedding + position)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.final_norm = make_norm(cfg, d) if cfg.final_norm else None
        self.logit_scale = logit_scale(cfg.vocab_size, d) if cfg.ngpt else None  # nGPT's s_z
        if cfg.objective == "mlm":
            self.mlm_dense = nn.Linear(d, d)
            self.mlm_norm = make_norm(cfg, d)
            self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        if not skeleton:
            self.init_buffers()
            init_weights(self)

    def init_buffers(self) -> None:
        """Computes the buffers no checkpoint stores (the sinusoidal position table), on the default
        device: at construction, and in a meta-device skeleton once a checkpoint's weights are in it."""
        if self.pos_emb is None:
            cfg = self.cfg
            # fairseq numbers positions from padding_idx + 1.
            n = cfg.max_seq_len + cfg.pad_token_id + 1
            self.sin_pos = sinusoidal_table(n, cfg.d_model, cfg.pad_token_id)[cfg.pad_token_id + 1 :].clone()

    def num_params(self, include_positions: bool = True) -> int:
        """Returns the parameter count (tied weights counted once)."""
        n = sum(p.numel() for p in self.parameters())
        if not include_positions and self.pos_emb is not None:
            n -= self.pos_emb.weight.numel()
        return n

    def encode(
        self,
        idx: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        last_layer_positions: slice | None = None,
    ) -> torch.Tensor:
        """Returns the final hidden states (B, T, d) of ``idx``; (B, len(positions), d) of
        ``last_layer_positions`` only when given (encoder only: the last layer then computes just those
        rows, which is all a sentence classifier reads).

        ``padding_mask`` (encoder only): True at real tokens. ``cache``: the tokens of ``idx`` follow the
        cached ones, whose keys/values are used and to which theirs are appended. ``position_ids`` (B, T):
        0-based positions (default: ``cache.length`` onwards). ``attn_mask`` (broadcastable to
        (B, H, T, cache.length + T)): True where a query may attend a key, or in the scores' dtype the
        0 / -inf SDPA adds to them; it replaces the causal mask, and every query must be allowed at
        least one key.
        """
        B, T = idx.shape
        if last_layer_positions is not None and (self.cfg.causal or cache is not None):
            raise ValueError("last_layer_positions is for an encoder without a cache")
        past = cache.length if cache is not None else 0
        if past + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {past + T} exceeds max_seq_len {self.cfg.max_seq_len}")
        table = self.pos_emb.weight if self.pos_emb is not None else self.sin_pos
        pos = table[past : past + T] if position_ids is None else table[position_ids]
        x = self.tok_emb(idx) * self.emb_scale + pos
        for norm in (self.emb_norm, self.emb_unit):
            if norm is not None:
                x = norm(x)
        x = self.dropout(x)
        if padding_mask is not None and not self.cfg.causal:
            attn_mask = padding_mask[:, None, None, :].bool()
        elif attn_mask is None and self.cfg.causal and past and T > 1:  # new queries after cached keys
            attn_mask = torch.ones(T, past + T, dtype=torch.bool, device=idx.device).tril(past)
        for i, block in enumerate(self.blocks):
            queries = last_layer_positions if i == len(self.blocks) - 1 else None
            x = block(x, attn_mask, cache.layers[i] if cache is not None else None, queries)
        if cache is not None:
            cache.length += T
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x

    def output_weight(self) -> torch.Tensor:
        """Returns the output projection's weight: the token embedding's (tied), each row times nGPT's s_z
        where on (z·s_z = (diag(s_z)·E) h)."""
        if self.logit_scale is None:
            return self.tok_emb.weight
        return self.tok_emb.weight * self.logit_scale.value()[:, None].to(self.tok_emb.weight.dtype)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns vocabulary logits for hidden states (output projection tied to the embedding)."""
        if self.cfg.objective == "mlm":
            hidden = self.mlm_norm(F.gelu(self.mlm_dense(hidden)))
            return self.linear(hidden, self.tok_emb.weight, self.mlm_bias)
        return self.linear(hidden, self.output_weight())

    def normalize_weights(self) -> None:
        """Puts nGPT's embedding and matrices back on the unit hypersphere (after each optimizer step:
        ``ngpt.renormalize``); does nothing for every other scheme."""
        if self.cfg.ngpt:
            renormalize(self)

    def forward(
        self, idx: torch.Tensor, padding_mask: torch.Tensor | None = None, **encode_kwargs: Any
    ) -> torch.Tensor:
        """Returns logits (B, T, vocab); the keyword arguments (position_ids, attn_mask, cache) are
        ``encode``'s."""
        hidden = self.encode(idx, padding_mask, **encode_kwargs)
        return self.lm_logits(hidden)

    def loss(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Returns the cross-entropy over targets != -100: their mean, or their sum (``reduction="sum"``,
        the trainer's, which divides by the global target count). The one loss computation."""
        hidden = self.encode(idx, padding_mask)
        if self.cfg.causal:  # (nearly) every position is a target: no gather, static shapes for compile
            logits = self.lm_logits(hidden).flatten(0, 1)
            return F.cross_entropy(logits.float(), targets.flatten(), reduction=reduction)
        keep = targets != -100
        logits = self.lm_logits(hidden[keep])  # masked LM: logits only where there is a target
        return F.cross_entropy(logits.float(), targets[keep], reduction=reduction)

    def fold_head_scale(self) -> None:
        """Folds every HeadScale gain into its out_proj; afterwards the config says scale_heads=False."""
        for block in self.blocks:
            block.attn.fold_head_gain()
        folded = self.cfg.replace(scale_heads=False)
        self.cfg = folded
        for block in self.blocks:
            block.attn.cfg = folded


class ClassificationHead(nn.Module):
    """RoBERTa's sentence head: pooled token → dense → tanh → dropout → out_proj (num_labels)."""

    def __init__(self, d_model: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_model, num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(pooled)))))


class SequenceClassifier(nn.Module):
    """A Transformer with a classification/regression head (num_labels=1 for regression).

    Pools the first token for an encoder (as RoBERTa), whose last layer then computes that row only,
    and the last real token for a causal model.
    """

    def __init__(self, transformer: Transformer, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.transformer = transformer
        self.head = ClassificationHead(transformer.cfg.d_model, num_labels, dropout)

    def forward(self, idx: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Returns (B, num_labels) scores."""
        if self.transformer.cfg.causal:
            hidden = self.transformer.encode(idx, padding_mask)
            last = (
                (padding_mask.long().sum(1) - 1)
                if padding_mask is not None
                else torch.full((idx.shape[0],), idx.shape[1] - 1, device=idx.device)
            )
            pooled = hidden[torch.arange(idx.shape[0], device=idx.device), last]
        else:
            pooled = self.transformer.encode(idx, padding_mask, last_layer_positions=slice(1))[:, 0]
        return self.head(pooled)
