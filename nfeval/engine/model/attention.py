"""The attention sub-layer of ``model.py``'s block: the q/k/v projection and its optional norms (Table 4's
``qkv_norm``, ``qk_norm``, ``v_norm``; nGPT's normalised and scaled q and k, ``qk_scale``), causal or masked
SDPA over the KV cache (nGPT's softmax scale √head_dim), the attention gate (``attn_gate``, Qiu et al. 2025),
the output projection and NormFormer's HeadScale (fairseq's ``c_attn``, after or before ``out_proj``, with
early fairseq's head/dim transposition bug on request), which inference folds into ``out_proj``. Each optional
op is a module that is ``None`` when off, in the op order of ``model.py``'s docstring."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .kv_cache import LayerCache
from .ngpt import QKScale
from .norms import make_norm


class SelfAttention(nn.Module):
    # the product of a part of ``qkv``'s weight (``project_heads`` at some queries only); a CPU kernel
    # converter may set another (``engine.fast.cpu_linear.convert``)
    linear = staticmethod(F.linear)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=not cfg.ngpt)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=not cfg.ngpt)
        self.head_gain = nn.Parameter(torch.ones(cfg.n_head)) if cfg.scale_heads else None
        # Gated attention's W_θ (Qiu et al. 2025): in the authors' code, extra rows of the query projection,
        # with its bias setting; here its own Linear, with a bias as qkv has, drawn as q's rows are
        # (initialisation.py)
        self.gate = nn.Linear(cfg.d_model, cfg.attn_gate_width) if cfg.attn_gate else None
        extra = cfg.normformer_norm
        self.query_norm, self.key_norm, self.value_norm = (
            (make_norm(cfg, cfg.d_model, extra, attention=True) for _ in range(3))
            if cfg.qkv_norm
            else (None, None, None)
        )
        self.q_head_norm, self.k_head_norm = (
            (make_norm(cfg, cfg.head_dim, attention=True) for _ in range(2)) if cfg.qk_norm else (None, None)
        )
        self.v_head_norm = make_norm(cfg, cfg.head_dim, attention=True) if cfg.v_norm else None
        # nGPT: Norm(q)·s_qk and Norm(k)·s_qk per head, under softmax scale √head_dim (ngpt.QKScale)
        self.qk_scale = QKScale(cfg.d_model, cfg.n_head) if cfg.ngpt else None
        self.softmax_scale = cfg.head_dim**0.5 if cfg.ngpt else None  # None: SDPA's 1/√head_dim

    def project_heads(
        self, x: torch.Tensor, queries: slice | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns the queries, keys and values (B, H, T, head_dim) of ``x`` (B, T, d), their norms
        applied: what attention multiplies and the KV cache stores. ``queries``: only those positions'
        queries (the keys and values of every position)."""
        cfg = self.cfg
        B, T, C = x.shape
        if queries is None:
            q, k, v = self.qkv(x).split(C, dim=2)
        else:
            w, b = self.qkv.weight, self.qkv.bias
            q = self.linear(x[:, queries], w[:C], None if b is None else b[:C])
            k, v = self.linear(x, w[C:], None if b is None else b[C:]).split(C, dim=2)
        if self.query_norm is not None:
            q, k, v = self.query_norm(q), self.key_norm(k), self.value_norm(v)
        q, k, v = (t.view(B, t.shape[1], cfg.n_head, cfg.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.q_head_norm is not None:
            q, k = self.q_head_norm(q), self.k_head_norm(k)
        if self.v_head_norm is not None:
            v = self.v_head_norm(v)
        if self.qk_scale is not None:
            q, k = self.qk_scale(q), self.qk_scale(k)
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
        queries: slice | None = None,
    ) -> torch.Tensor:
        """Returns the attention output (B, T, d), or (B, len(queries), d) at ``queries`` only."""
        cfg = self.cfg
        q, k, v = self.project_heads(x, queries)
        B, T, C = q.shape[0], q.shape[2], x.shape[2]
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
            scale=self.softmax_scale,
        )
        if self.gate is not None:  # Y' = Y ⊙ σ(X W_θ), X this sub-layer's input at the queries' positions
            gate = torch.sigmoid(self.gate(x if queries is None else x[:, queries]))
            y = y * gate.view(B, T, cfg.n_head, -1).transpose(1, 2)
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
