"""nGPT's ops (Loshchilov, Hsieh, Sun & Ginsburg, "nGPT: Normalized Transformer with Representation
Learning on the Hypersphere", ICLR 2025), for the one Block under ``norm_position="ngpt"``.

Every learned scaling is stored as the paper stores it (its s_init / s_scale pairs, as NVIDIA/ngpt's
``model.py`` has them): a parameter drawn at ``s_scale`` and used as ``s · (s_init / s_scale)``, so its
effective value starts at ``s_init`` while Adam's steps on it are of the size of ``s_scale``:

    eigen learning rates α_A, α_M (per channel)   init 0.05, scale 1/√d   used as |α| (the authors' code)
    s_qk (per head and channel of q and k)         init 1,    scale 1/√d
    s_u, s_ν (per FFN channel)                     init 1,    scale 1      ν also times √d
    s_z (per vocabulary entry)                     init 1,    scale 1/√d

``Norm`` is the L2 normalisation x / ‖x‖ over the last dimension (``unit``). The weights live on the
hypersphere too: ``renormalize`` puts each embedding and every weight matrix back on it along the
embedding dimension, at init and after every optimizer step (the paper's summary of its changes; the
authors' ``normalize_matrices`` in their ``train.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

ALPHA_INIT = 0.05  # α_A, α_M (the paper's α_{A,init}, α_{M,init}; the authors' code 0.05)


def unit(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Returns ``x`` L2-normalised along ``dim`` (a zero vector stays zero: ``F.normalize``'s eps)."""
    return F.normalize(x, dim=dim)


class Scaling(nn.Module):
    """A learned per-channel scaling of ``dim`` entries in the paper's parametrisation: the parameter
    starts at ``scale`` and is used as ``weight · (init / scale) · factor``."""

    def __init__(self, dim: int, init: float, scale: float, factor: float = 1.0):
        super().__init__()
        self.init, self.scale, self.factor = init, scale, factor
        self.weight = nn.Parameter(torch.full((dim,), float(scale)))

    def value(self) -> torch.Tensor:
        """Returns the effective scaling, ``weight · (init / scale) · factor``."""
        return self.weight * (self.init / self.scale * self.factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.value().to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, init={self.init}, scale={self.scale:.4g}, factor={self.factor:.4g}"


class HypersphereStep(nn.Module):
    """One sub-layer's update on the hypersphere, h <- Norm(h + |α| ⊙ (Norm(f(h)) - h)) (the paper's
    update of the attention and MLP blocks; the authors' ``model.py``, which takes |α|), α the
    sub-layer's eigen learning rates (init 0.05, scale 1/√d)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.alpha = Scaling(d_model, ALPHA_INIT, d_model**-0.5)

    def forward(self, h: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        rate = self.alpha.value().abs().to(h.dtype)
        return unit(h + rate * (unit(f) - h))


class QKScale(nn.Module):
    """q <- Norm(q) s_qk and k <- Norm(k) s_qk, each head's vectors normalised over head_dim, s_qk one
    value per head and channel (init 1, scale 1/√d); applied to (B, H, T, head_dim) tensors."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.s_qk = Scaling(d_model, 1.0, d_model**-0.5)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        s = self.s_qk.value().to(t.dtype).view(self.n_head, 1, -1)
        return unit(t) * s


class FFNScale(nn.Module):
    """The FFN's u <- u s_u and ν <- ν s_ν √d on fc1's output (the paper's normalised MLP block; init 1,
    scale 1), ν
    the activation's argument: with a GLU, fc1's output is [ν, u] (model.py's ``gate, up``); without
    one it is ν alone, and there is no u."""

    def __init__(self, d_model: int, d_ffn: int, glu: bool):
        super().__init__()
        self.s_nu = Scaling(d_ffn, 1.0, 1.0, math.sqrt(d_model))
        self.s_u = Scaling(d_ffn, 1.0, 1.0) if glu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s_nu.value()
        if self.s_u is not None:
            s = torch.cat([s, self.s_u.value()])
        return x * s.to(x.dtype)


def logit_scale(vocab_size: int, d_model: int) -> Scaling:
    """Returns s_z, the per-entry scaling of the logits (init 1, scale 1/√d, as the authors' ``sz``)."""
    return Scaling(vocab_size, 1.0, d_model**-0.5)


# Each block matrix nGPT keeps on the hypersphere, with the dimension of its weight (out × in) that is
# the embedding's: the rows of the matrices that read the residual stream, the columns of those that write
# to it (the authors' normalize_matrices: query/key/value/c_fc along 1, att_c_proj/mlp_c_proj along 0)
BLOCK_MATRICES = (("attn.qkv", 1), ("attn.out_proj", 0), ("fc1", 1), ("fc2", 0))


@torch.no_grad()
def renormalize(model: nn.Module) -> None:
    """Puts ``model``'s token embedding (tied to the output projection) and each block matrix of
    ``BLOCK_MATRICES`` back on the unit hypersphere along the embedding dimension, in place."""
    weights = [(model.tok_emb.weight, 1)]
    for block in model.blocks:
        weights += [(block.get_submodule(name).weight, dim) for name, dim in BLOCK_MATRICES]
    for w, dim in weights:
        w.copy_(unit(w, dim))
