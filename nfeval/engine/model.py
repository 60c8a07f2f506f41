"""One Transformer for Pre-LN, Post-LN and NormFormer (causal decoder or bidirectional encoder).

The block follows fairseq's ``transformer_layer.py``; NormFormer's extra ops are config flags:

    residual = x
    x = attn_norm(x)                     if pre-LN        (fairseq self_attn_layer_norm)
    x = out_proj(attention(x))
    x = x * head_gain (per head)         if scale_heads   (fairseq c_attn; after or before out_proj)
    x = attn_out_norm(x)                 if scale_attn    (fairseq attn_ln)
    x = residual + dropout(x)
    x = attn_norm(x)                     if post-LN
    residual = x
    x = ffn_norm(x)                      if pre-LN        (fairseq final_layer_norm)
    x = activation(fc1(x))
    x = ffn_hidden_norm(x)               if scale_fc      (fairseq ffn_layernorm)
    x = dropout(fc2(x))
    residual = resid_gain * residual     if scale_resids  (fairseq w_resid)
    x = residual + x
    x = ffn_norm(x)                      if post-LN

Padding is expected on the right; for a causal model the causal mask already hides it.

Inference (``nfeval.engine.generate``) passes three optional arguments to ``encode``/``forward``:
``cache`` (a ``KVCache``: each layer's keys and values of the tokens seen so far; the new tokens sit
after them), ``position_ids`` (per-row positions, e.g. for left-padded prompts) and ``attn_mask``
(bool, True where a query may attend a key; it replaces the causal mask). Without them the training
forward runs SDPA with ``is_causal``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig


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


def activation_fn(name: str):
    """Returns the activation function for a config name (exact GELU, as fairseq)."""
    if name == "gelu":
        return F.gelu
    if name == "relu_squared":
        return lambda x: F.relu(x).square()
    raise ValueError(f"unknown activation {name!r}")


class LayerCache:
    """One layer's keys and values (B, H, capacity, head_dim); the first ``KVCache.length`` are filled."""

    def __init__(self, owner: KVCache, keys: torch.Tensor, values: torch.Tensor):
        self.owner, self.keys, self.values = owner, keys, values

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores the new tokens' keys/values after the cached ones; returns all of them so far."""
        start, end = self.owner.length, self.owner.length + k.shape[2]
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """Keys and values of every layer for the tokens seen so far, in buffers allocated once.

    ``Transformer.encode`` appends the new tokens to every layer, then advances ``length``.
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, capacity: int, device=None, dtype=None):
        if capacity > cfg.max_seq_len:
            raise ValueError(f"cache capacity {capacity} exceeds max_seq_len {cfg.max_seq_len}")
        shape = (batch_size, cfg.n_head, capacity, cfg.head_dim)
        self.capacity, self.length = capacity, 0
        self.layers = [
            LayerCache(
                self,
                torch.empty(shape, device=device, dtype=dtype),
                torch.empty(shape, device=device, dtype=dtype),
            )
            for _ in range(cfg.n_layer)
        ]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps only the batch rows ``rows`` (a LongTensor of indices), e.g. to drop finished ones."""
        for layer in self.layers:
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.head_gain = nn.Parameter(torch.ones(cfg.n_head)) if cfg.scale_heads else None

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        cfg = self.cfg
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, cfg.n_head, cfg.head_dim).transpose(1, 2) for t in self.qkv(x).split(C, dim=2)
        )
        if cache is not None:
            k, v = cache.append(k, v)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=cfg.attn_dropout if self.training else 0.0,
            # without a mask, a causal query sees every key before it: the SDPA causal mask when the
            # queries are all the keys, no mask for one new query after cached ones (encode sees to it)
            is_causal=cfg.causal and attn_mask is None and k.shape[2] == T,
        )
        gain = self.head_gain
        if gain is not None and cfg.head_scale_position == "before_out_proj":
            y = y * gain.view(1, -1, 1, 1).to(y.dtype)
        y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))
        if gain is not None and cfg.head_scale_position == "after_out_proj":
            y = y.view(B, T, cfg.n_head, cfg.head_dim) * gain.view(-1, 1).to(y.dtype)
            if cfg.head_scale_transpose_bug:
                y = y.transpose(-1, -2)
            y = y.reshape(B, T, C)
        return y

    @torch.no_grad()
    def fold_head_gain(self) -> None:
        """Folds the head gains into ``out_proj`` so inference pays nothing for them; removes the gains."""
        if self.head_gain is None:
            return
        cfg = self.cfg
        per_channel = self.head_gain.repeat_interleave(cfg.head_dim)  # channel h*hd + j -> gain[h]
        w, b = self.out_proj.weight, self.out_proj.bias
        if cfg.head_scale_position == "before_out_proj":
            w.mul_(per_channel[None, :])
        else:
            w.mul_(per_channel[:, None])
            b.mul_(per_channel)
            if cfg.head_scale_transpose_bug:
                perm = torch.arange(cfg.d_model).view(cfg.n_head, cfg.head_dim).t().reshape(-1)
                w.copy_(w[perm])
                b.copy_(b[perm])
        self.head_gain = None


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, eps = cfg.d_model, cfg.layer_norm_eps
        self.pre = cfg.norm_position == "pre"
        self.attn_norm = nn.LayerNorm(d, eps=eps)
        self.attn = SelfAttention(cfg)
        self.attn_out_norm = nn.LayerNorm(d, eps=eps) if cfg.scale_attn else None
        self.ffn_norm = nn.LayerNorm(d, eps=eps)
        self.fc1 = nn.Linear(d, cfg.d_ffn)
        self.ffn_hidden_norm = nn.LayerNorm(cfg.d_ffn, eps=eps) if cfg.scale_fc else None
        self.fc2 = nn.Linear(cfg.d_ffn, d)
        self.resid_gain = nn.Parameter(torch.ones(d)) if cfg.scale_resids else None
        self.act = activation_fn(cfg.activation)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        residual = x
        if self.pre:
            x = self.attn_norm(x)
        x = self.attn(x, attn_mask, cache)
        if self.attn_out_norm is not None:
            x = self.attn_out_norm(x)
        x = residual + self.dropout(x)
        if not self.pre:
            x = self.attn_norm(x)

        residual = x
        if self.pre:
            x = self.ffn_norm(x)
        x = self.act(self.fc1(x))
        if self.ffn_hidden_norm is not None:
            x = self.ffn_hidden_norm(x)
        x = self.dropout(self.fc2(x))
        if self.resid_gain is not None:
            residual = residual * self.resid_gain
        x = residual + x
        if not self.pre:
            x = self.ffn_norm(x)
        return x


class Transformer(nn.Module):
    """Token embedding, blocks, and the language-model head (tied; RoBERTa-style head for MLM)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.max_seq_len, d)
        else:
            self.pos_emb = None
            # fairseq numbers positions from padding_idx + 1.
            table = sinusoidal_table(cfg.max_seq_len + cfg.pad_token_id + 1, d, cfg.pad_token_id)
            self.register_buffer("sin_pos", table[cfg.pad_token_id + 1 :].clone(), persistent=False)
        self.emb_scale = math.sqrt(d) if cfg.scale_embedding else 1.0
        self.emb_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.embedding_norm else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.final_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.final_norm else None
        if cfg.objective == "mlm":
            self.mlm_dense = nn.Linear(d, d)
            self.mlm_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        init_weights(self)

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
    ) -> torch.Tensor:
        """Returns the final hidden states (B, T, d) of ``idx``.

        ``padding_mask`` (encoder only): True at real tokens. ``cache``: the tokens of ``idx`` follow the
        cached ones, whose keys/values are used and to which theirs are appended. ``position_ids`` (B, T):
        0-based positions (default: ``cache.length`` onwards). ``attn_mask`` (bool, broadcastable to
        (B, H, T, cache.length + T)): True where a query may attend a key; it replaces the causal mask,
        and every query must be allowed at least one key.
        """
        B, T = idx.shape
        past = cache.length if cache is not None else 0
        if past + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {past + T} exceeds max_seq_len {self.cfg.max_seq_len}")
        table = self.pos_emb.weight if self.pos_emb is not None else self.sin_pos
        pos = table[past : past + T] if position_ids is None else table[position_ids]
        x = self.tok_emb(idx) * self.emb_scale + pos
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        x = self.dropout(x)
        if padding_mask is not None and not self.cfg.causal:
            attn_mask = padding_mask[:, None, None, :].bool()
        elif attn_mask is None and self.cfg.causal and past and T > 1:  # new queries after cached keys
            attn_mask = torch.ones(T, past + T, dtype=torch.bool, device=idx.device).tril(past)
        for i, block in enumerate(self.blocks):
            x = block(x, attn_mask, cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.length += T
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns vocabulary logits for hidden states (output projection tied to the embedding)."""
        if self.cfg.objective == "mlm":
            hidden = self.mlm_norm(F.gelu(self.mlm_dense(hidden)))
            return F.linear(hidden, self.tok_emb.weight, self.mlm_bias)
        return F.linear(hidden, self.tok_emb.weight)

    def forward(
        self, idx: torch.Tensor, padding_mask: torch.Tensor | None = None, **encode_kwargs: Any
    ) -> torch.Tensor:
        """Returns logits (B, T, vocab); the keyword arguments (position_ids, attn_mask, cache) are
        ``encode``'s."""
        hidden = self.encode(idx, padding_mask, **encode_kwargs)
        return self.lm_logits(hidden)

    def loss(
        self, idx: torch.Tensor, targets: torch.Tensor, padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Returns mean cross-entropy over targets != -100 (logits computed only where needed)."""
        hidden = self.encode(idx, padding_mask)
        keep = targets != -100
        logits = self.lm_logits(hidden[keep])
        return F.cross_entropy(logits.float(), targets[keep])

    def fold_head_scale(self) -> None:
        """Folds every HeadScale gain into its out_proj; afterwards the config says scale_heads=False."""
        for block in self.blocks:
            block.attn.fold_head_gain()
        folded = self.cfg.replace(scale_heads=False)
        self.cfg = folded
        for block in self.blocks:
            block.attn.cfg = folded


# --- initialisation (ModelConfig.init) ------------------------------------------------------------------
#
# gpt2: every Linear and Embedding N(0, 0.02), biases 0; the residual projections (out_proj, fc2)
#   N(0, 0.02/sqrt(2L)); token embeddings N(0, d^-1/2) when scale_embedding.
# fairseq (transformer_lm_gpt: MultiheadAttention.reset_parameters, transformer_lm's Embedding):
#   q, k, v weights xavier-uniform with gain 1/sqrt(2) (each d x d block of the fused qkv), their biases
#   nn.Linear's default; out_proj xavier-uniform, bias 0; fc1, fc2 (and the MLM dense) nn.Linear's
#   default, U(+-1/sqrt(fan_in)); token and learned position embeddings N(0, d^-1/2), padding row 0.
# bert (fairseq's init_bert_params): every Linear N(0, 0.02), bias 0; every Embedding N(0, 0.02),
#   padding row 0.
# All: LayerNorms weight 1, bias 0; HeadScale and ResScale gains 1; the MLM output bias 0.


def init_weights(model: Transformer) -> None:
    """Draws ``model``'s weights as its config's ``init`` scheme does (see above); returns nothing."""
    schemes = {"gpt2": _init_gpt2, "fairseq": _init_fairseq, "bert": _init_bert}
    with torch.no_grad():
        schemes[model.cfg.init](model)


def _zero_padding_row(model: Transformer) -> None:
    if 0 <= model.cfg.pad_token_id < model.cfg.vocab_size:
        model.tok_emb.weight[model.cfg.pad_token_id] = 0


def _normal_linear_and_embedding(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _init_gpt2(model: Transformer) -> None:
    cfg = model.cfg
    model.apply(_normal_linear_and_embedding)  # apply's order: the same draws as before the field existed
    for name, p in model.named_parameters():
        if name.endswith(("out_proj.weight", "fc2.weight")):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
    if cfg.scale_embedding:
        nn.init.normal_(model.tok_emb.weight, mean=0.0, std=cfg.d_model**-0.5)


def _init_fairseq(model: Transformer) -> None:
    d = model.cfg.d_model
    for block in model.blocks:
        for w in block.attn.qkv.weight.split(d):  # q, k, v: views into the fused weight
            nn.init.xavier_uniform_(w, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(block.attn.out_proj.weight)
        nn.init.zeros_(block.attn.out_proj.bias)
    nn.init.normal_(model.tok_emb.weight, mean=0.0, std=d**-0.5)
    _zero_padding_row(model)
    if model.pos_emb is not None:
        nn.init.normal_(model.pos_emb.weight, mean=0.0, std=d**-0.5)


def _init_bert(model: Transformer) -> None:
    model.apply(_normal_linear_and_embedding)
    _zero_padding_row(model)


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

    Pools the first token for an encoder (as RoBERTa) and the last real token for a causal model.
    """

    def __init__(self, transformer: Transformer, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.transformer = transformer
        self.head = ClassificationHead(transformer.cfg.d_model, num_labels, dropout)

    def forward(self, idx: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Returns (B, num_labels) scores."""
        hidden = self.transformer.encode(idx, padding_mask)
        if self.transformer.cfg.causal:
            last = (
                (padding_mask.long().sum(1) - 1)
                if padding_mask is not None
                else torch.full((idx.shape[0],), idx.shape[1] - 1, device=idx.device)
            )
            pooled = hidden[torch.arange(idx.shape[0], device=idx.device), last]
        else:
            pooled = hidden[:, 0]
        return self.head(pooled)


# --- FLOPs (ModelConfig x sequence length -> training FLOPs per token) ------------------------------------
#
# Forward FLOPs per element of each op that is not a matmul. Training counts every op 3x its forward
# (backward ~ 2x forward), the convention of the 6N matmul count, so a term is 3 x forward.
FLOPS_PER_ELEMENT = {
    "layer_norm": 7,  # mean, subtract it, square, variance sum, normalise, gain, bias (rsqrt per row: 0)
    "gelu": 8,  # exact 0.5x(1 + erf(x/sqrt 2)): divide, erf (counted 4), add, two multiplies
    "relu_squared": 2,  # max, multiply
    "softmax": 5,  # max, subtract it, exp, sum, divide (the loss's log-softmax: log instead of divide)
    "multiply": 1,  # HeadScale, ResScale, the sqrt(d) embedding scale, attention's 1/sqrt(head_dim)
    "add": 1,  # residual, bias and position additions
}
TRAINING_PASSES = 3  # forward + backward
# What the FLOP count (and so every "equal FLOPs" reading) counts, for tables to state.
FLOPS_COUNTED = (
    "FLOPs = forward + backward (3x forward) of the weight and attention matmuls and of every "
    "elementwise op: LayerNorms (NormFormer's included), HeadScale, ResScale, activation, softmax, "
    "embedding scale, residual/bias adds, loss (nfeval.engine.model.training_flops_breakdown)"
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
    (a mask multiply, off in the presets) is not counted. A new op adds its term here.
    """
    d, f, L, T, V = cfg.d_model, cfg.d_ffn, cfg.n_layer, seq_len, cfg.vocab_size
    e, mlm = FLOPS_PER_ELEMENT, not cfg.causal
    head = masked_fraction if mlm else 1.0  # the share of tokens that run the LM head and loss
    norm_elements = (
        L * (2 * d + d * cfg.scale_attn + f * cfg.scale_fc)  # attn/ffn norms, NormFormer's two
        + d * bool(cfg.final_norm)
        + d * cfg.embedding_norm
        + head * d * mlm  # the MLM head's LayerNorm
    )
    forward = {
        "weight_matmuls": 2 * (L * (4 * d * d + 2 * d * f) + head * (V * d + d * d * mlm)),
        "attention_matmuls": 2 * 2 * L * d * T,
        "attention_softmax": L * cfg.n_head * T * (e["softmax"] + e["multiply"]),
        "layer_norms": e["layer_norm"] * norm_elements,
        "head_scale": e["multiply"] * L * d * cfg.scale_heads,
        "res_scale": e["multiply"] * L * d * cfg.scale_resids,
        "activation": e[cfg.activation] * L * f + e["gelu"] * head * d * mlm,
        "embedding": e["multiply"] * d * cfg.scale_embedding + e["add"] * d,  # scale, position add
        # per layer: 2 residual adds, biases of qkv (3d), out_proj, fc1, fc2; the MLM head's two biases
        "adds": e["add"] * (L * (7 * d + f) + head * (d + V) * mlm),
        "loss_softmax": e["softmax"] * head * V,
    }
    return {op: TRAINING_PASSES * float(v) for op, v in forward.items()}


def training_flops_per_token(cfg: ModelConfig, seq_len: int, masked_fraction: float = 0.15) -> float:
    """Returns model FLOPs per trained token: the sum of ``training_flops_breakdown``'s terms."""
    return sum(training_flops_breakdown(cfg, seq_len, masked_fraction).values())
