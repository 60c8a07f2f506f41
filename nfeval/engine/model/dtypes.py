"""The one name → torch dtype table. Commands keep their own allowed ``--dtype`` choices
(``base.cli_args.dtype_type``); every spelling they accept maps to a torch dtype here."""

from __future__ import annotations

import torch

from ...base.cli_args import DTYPE_SPELLINGS, LONG_NAMES
from ...base.errors import ConfigError

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHORT_NAMES = {dtype: short for short, dtype in TORCH_DTYPES.items()}


def torch_dtype(name: str | torch.dtype | None) -> torch.dtype:
    """Returns the torch dtype for a name such as ``float32``/``fp32``/``bfloat16``/``bf16``
    (None and ``auto``: float32); a torch dtype is returned as is."""
    if isinstance(name, torch.dtype):
        return name
    short = "fp32" if name is None else DTYPE_SPELLINGS.get(name)
    if short == "auto":
        short = "fp32"
    if short not in TORCH_DTYPES:
        raise ConfigError(f"dtype {name!r}: expected float32, bfloat16 or float16")
    return TORCH_DTYPES[short]


def long_name(dtype: torch.dtype) -> str:
    """Returns the long spelling of a torch dtype (``float32``, ``bfloat16``, ``float16``)."""
    return LONG_NAMES[SHORT_NAMES[dtype]]
