"""What one training run holds in accelerator memory, estimated before it starts: how many runs of a small
model can share one GPU (``launch.local.gpu_jobs``).

The estimate, per process: the CUDA context; the fp32 weights, gradients and AdamW's two moments (16
bytes a parameter); the activations kept for the backward pass without recomputation, per layer
s·b·d·34 bytes at 16-bit plus 5·a·s²·b for the attention scores (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", eq. 1; fp32 doubles them); the logits and their
gradient in fp32. It leaves a margin (``MARGIN``) for the allocator's fragmentation: a run that needs
more than it is said here fails with the device's out-of-memory error, and ``--runs-per-gpu N`` sets the
count by hand.
"""

from __future__ import annotations

import torch

from ..model.config import ModelConfig
from ..model.model import Transformer

CUDA_CONTEXT_BYTES = 600 * 2**20  # a process's CUDA context and cuBLAS workspace, rounded up
STATE_BYTES_PER_PARAM = 16  # fp32 weight, gradient, AdamW's exp_avg and exp_avg_sq
MARGIN = 1.25


def parameter_count(model: ModelConfig) -> int:
    """Returns the parameters of ``model``, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(model).parameters())


def training_bytes(model: ModelConfig, batch_size: int, seq_len: int, dtype: str = "fp32") -> int:
    """Returns the estimated accelerator memory of one training process of ``model`` on batches of
    ``batch_size`` sequences of ``seq_len`` tokens, its activations in ``dtype`` ("fp32", "bf16",
    "fp16"), the margin included."""
    half = 1 if dtype in ("bf16", "fp16") else 2  # Korthikanti's counts are for 16-bit activations
    s, b, d, a = seq_len, batch_size, model.d_model, model.n_head
    activations = model.n_layer * (s * b * d * 34 + 5 * a * s * s * b) * half
    logits = 2 * 4 * s * b * model.vocab_size
    state = STATE_BYTES_PER_PARAM * parameter_count(model)
    return int(MARGIN * (CUDA_CONTEXT_BYTES + state + activations + logits))
