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

from ..base.cli_args import dtype_spellings, dtype_type, positive_int
from ..base.config_flags import flag_field
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
    """Fine-tuning hyper-parameters other than the learning rate and seed (fairseq RoBERTa GLUE defaults);
    the fields with a help text are ``nfeval glue``'s flags (``base.config_flags``)."""

    epochs: int = flag_field(10, "epochs per point (default 10)", type=positive_int)
    warmup_ratio: float = flag_field(0.06, "share of updates with linear warmup (default 0.06)")
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    weight_decay: float = flag_field(0.1, "AdamW weight decay (default 0.1)")
    dropout: float = flag_field(0.1, "dropout and attention dropout (default 0.1)")
    attn_dropout: float = 0.1  # no flag: nfeval glue's --dropout sets both
    clip_norm: float = 0.0  # 0: no clipping, as the recipe
    batch_size: int | None = flag_field(  # None: 32 for large tasks, 16 for small ones
        None, "default: 32 for MNLI/QNLI/QQP/SST-2, 16 for the others", type=positive_int
    )
    eval_batch_size: int = flag_field(64, "dev batch size (default 64)", type=positive_int)
    max_len: int = flag_field(
        512, "max tokens per input (capped at the model's) (default 512)", type=positive_int
    )
    select: str = flag_field(
        "best_epoch", "which epoch a point reports (default: the best on dev, as fairseq)", choices=SELECTIONS
    )
    dtype: str = flag_field(
        "auto",
        f"{dtype_spellings(DTYPES)}. auto (default): bf16 on GPUs that support it",
        type=dtype_type(DTYPES),
        metavar="DTYPE",
    )

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
