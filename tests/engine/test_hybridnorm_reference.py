"""HybridNorm and HybridNorm* (Zhuo et al. 2025) against a reference written from the paper's equations in
plain torch, on the same weights: logits and every parameter's gradient.

The paper (§3, its eqs. for QKV-Norm and the HybridNorm block), with its authors' OLMo code
(github BryceZhuo/HybridNorm, dense_model/olmo/model.py: OLMoBlock.attention normalises q, k and v after
splitting the heads, each norm of size d_model // n_heads; OLMoSequentialBlock.forward with attn_norm
false and ffn_residual_after_norm true; HybridNorm*: norm_pos_special_config {0: attn_norm true,
ffn_residual false}):

    head_i = softmax(Norm(X W_Q^i) Norm(X W_K^i)ᵀ / √d_k) Norm(X W_V^i)       (each head over d_k)
    Y^l     = X^l + Concat(head_1 … head_h) W_O
    X^{l+1} = Norm(Y^l) + FFN(Norm(Y^l))

HybridNorm*'s first block is Pre-Norm (its attention keeping QKV-Norm): Y = X + MHA_QKV(Norm(X)),
X' = Y + FFN(Norm(Y)). The stack ends with a final norm (OLMo's ln_f) and the tied output projection.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_norm_placements import randomize

from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer


def norm(x: torch.Tensor, w: dict[str, torch.Tensor], name: str, eps: float) -> torch.Tensor:
    """LayerNorm (x − mean)/√(var + ε)·γ + β, or RMSNorm x/√(mean(x²) + ε)·γ when ``name`` has no bias."""
    if f"{name}.bias" in w:
        x = x - x.mean(-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[f"{name}.weight"]


def mha_qkv(x: torch.Tensor, w: dict[str, torch.Tensor], p: str, heads: int, eps: float) -> torch.Tensor:
    """Causal MHA with QKV-Norm: each head's q, k and v normalised over d_k (one gain for all heads)."""
    B, T, d = x.shape
    dk = d // heads
    qkv = x @ w[f"{p}.qkv.weight"].T + w[f"{p}.qkv.bias"]
    q, k, v = (t.reshape(B, T, heads, dk).transpose(1, 2) for t in qkv.split(d, dim=-1))
    q, k, v = (norm(t, w, f"{p}.{n}_head_norm", eps) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
    return y @ w[f"{p}.out_proj.weight"].T + w[f"{p}.out_proj.bias"]


def ffn(x: torch.Tensor, w: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    h = x @ w[f"{p}.fc1.weight"].T + w[f"{p}.fc1.bias"]
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    return h @ w[f"{p}.fc2.weight"].T + w[f"{p}.fc2.bias"]


def reference_logits(w: dict[str, torch.Tensor], pos: torch.Tensor, idx: torch.Tensor, cfg) -> torch.Tensor:
    """The logits of the equations above on weights ``w`` (named as the model's parameters), the position
    table ``pos`` and token ids ``idx``."""
    eps, heads = cfg.layer_norm_eps, cfg.n_head
    x = w["tok_emb.weight"][idx] * math.sqrt(cfg.d_model) + pos[: idx.shape[1]]
    for layer in range(cfg.n_layer):
        p = f"blocks.{layer}"
        if layer == 0 and cfg.first_block_prenorm:  # HybridNorm*: Pre-Norm, QKV-Norm kept
            y = x + mha_qkv(norm(x, w, f"{p}.attn_norm", eps), w, f"{p}.attn", heads, eps)
            x = y + ffn(norm(y, w, f"{p}.ffn_norm", eps), w, p)
            continue
        y = x + mha_qkv(x, w, f"{p}.attn", heads, eps)
        z = norm(y, w, f"{p}.ffn_norm", eps)
        x = z + ffn(z, w, p)
    return norm(x, w, "final_norm", eps) @ w["tok_emb.weight"].T


def hybrid_model(name: str, **overrides) -> Transformer:
    cfg = preset(f"{name}-tiny", vocab_size=61, max_seq_len=32, n_layer=3, **overrides)
    model = Transformer(cfg)
    randomize(model, seed=5)  # every gain and bias away from its init, so that each one is checked
    return model.double()


CASES = [("hybridnorm", {}), ("hybridnormstar", {}), ("hybridnorm", {"norm": "rmsnorm"})]


@pytest.mark.parametrize("name, overrides", CASES)
def test_forward_and_gradients_match_the_papers_equations(name, overrides):
    model = hybrid_model(name, **overrides)
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, model.cfg.vocab_size, (2, 9), generator=g)
    targets = torch.randint(0, model.cfg.vocab_size, (2, 9), generator=g)
    weights = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
    ref = reference_logits(weights, model.sin_pos, idx, model.cfg)
    logits = model(idx)
    torch.testing.assert_close(logits, ref, rtol=1e-10, atol=1e-10)
    # the same float64 loss on both (Transformer.loss takes its cross-entropy in float32)
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    loss = F.cross_entropy(ref.flatten(0, 1), targets.flatten())
    grads = torch.autograd.grad(loss, list(weights.values()))
    for (n, p), grad in zip(model.named_parameters(), grads):
        torch.testing.assert_close(p.grad, grad, rtol=1e-9, atol=1e-11, msg=lambda m, n=n: f"{n}: {m}")


def test_a_norm_over_d_model_is_not_the_papers_qkv_norm():
    """The reference tells the QKV-Norm's width: q, k and v normalised over the whole d_model (Table 4's
    ``qkv_norm``, the preset before it followed the authors' code) give other logits."""
    model = hybrid_model("hybridnorm")
    wide = hybrid_model("hybridnorm", qk_norm=False, v_norm=False, qkv_norm=True)
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(4))
    weights = dict(model.named_parameters())
    for n in ("q", "k", "v"):  # the same gains, each head given the head's slice
        for i in range(3):
            wide_norm = getattr(
                wide.blocks[i].attn, {"q": "query_norm", "k": "key_norm", "v": "value_norm"}[n]
            )
            for part in ("weight", "bias"):
                head = weights[f"blocks.{i}.attn.{n}_head_norm.{part}"]
                getattr(wide_norm, part).data.copy_(head.repeat(model.cfg.n_head))
    shared = {n: p for n, p in wide.named_parameters() if n in weights}
    with torch.no_grad():
        for n, p in shared.items():
            p.copy_(weights[n])
        ref = reference_logits(weights, model.sin_pos, idx, model.cfg)
        torch.testing.assert_close(model(idx), ref, rtol=1e-10, atol=1e-10)
        assert not torch.allclose(wide(idx), ref, rtol=1e-3, atol=1e-3)
