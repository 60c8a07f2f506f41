"""The GLUE fine-tuning recipe: ``Recipe`` as the user sets it (fairseq RoBERTa GLUE defaults), and
``ResolvedRecipe``, the recipe as run on one task (batch size, length cap and dtype filled in).

The resolved recipe is part of each point's resume key (``as_dict()``, stored in ``result.json``), so a
point is reused only for exactly the recipe it was computed with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..base.errors import ConfigError
from . import data as glue_data

SELECTIONS = ("best_epoch", "last_epoch")
DTYPES = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class ResolvedRecipe:
    """The fine-tuning hyper-parameters of one task, every value final (no ``None``, no ``auto``)."""

    epochs: int
    warmup_ratio: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    dropout: float
    attn_dropout: float
    clip_norm: float
    batch_size: int
    eval_batch_size: int
    max_len: int
    select: str
    dtype: str  # "bf16" or "fp32"

    @property
    def bf16(self) -> bool:
        return self.dtype == "bf16"

    def as_dict(self) -> dict[str, Any]:
        """Returns the recipe as the JSON object stored in results (``betas`` a list)."""
        return {**dataclasses.asdict(self), "betas": list(self.betas)}


@dataclass
class Recipe:
    """Fine-tuning hyper-parameters other than the learning rate and seed (fairseq RoBERTa GLUE defaults)."""

    epochs: int = 10
    warmup_ratio: float = 0.06
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    weight_decay: float = 0.1
    dropout: float = 0.1
    attn_dropout: float = 0.1
    clip_norm: float = 0.0  # 0: no clipping, as the recipe
    batch_size: int | None = None  # None: 32 for large tasks, 16 for small ones
    eval_batch_size: int = 64
    max_len: int = 512
    select: str = "best_epoch"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"recipe epochs={self.epochs}: expected at least 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"recipe batch_size={self.batch_size}: expected a positive integer")
        if self.max_len < 8:
            raise ConfigError(f"recipe max_len={self.max_len}: expected at least 8 tokens")
        if self.select not in SELECTIONS:
            raise ConfigError(f"recipe select={self.select!r}: expected one of {SELECTIONS}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"recipe dtype={self.dtype!r}: expected one of {DTYPES}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"recipe warmup_ratio={self.warmup_ratio}: expected a value in [0, 1)")

    def resolve(self, spec: glue_data.TaskSpec, max_seq_len: int, device: str) -> ResolvedRecipe:
        """Returns the recipe as run on ``spec``'s task: batch size, length cap and dtype filled in."""
        dtype = self.dtype
        if dtype == "auto":
            cuda = device.startswith("cuda") and torch.cuda.is_available()
            dtype = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
        return ResolvedRecipe(
            **{
                **dataclasses.asdict(self),
                "betas": tuple(self.betas),
                "batch_size": self.batch_size or (32 if spec.large else 16),
                "max_len": min(self.max_len, max_seq_len),
                "dtype": dtype,
            }
        )
