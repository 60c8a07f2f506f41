"""Finding the largest batch that fits in a device's memory: tries at halving sizes, freeing between."""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch


def halving_search(fits: Callable[[int], object], size: int, free_memory: Callable[[], None]) -> int:
    """Returns the largest of ``size`` // 2, // 4, …, 1 for which ``fits(n)`` raises no
    torch.OutOfMemoryError (0 when none does), calling ``free_memory()`` before each try."""
    n = size // 2
    while n >= 1:
        free_memory()
        try:
            fits(n)
            return n
        except torch.OutOfMemoryError:
            pass  # the next try frees what this one held, its traceback gone with the handler
        n //= 2
    return 0


def free_cached(device: torch.device | str) -> None:
    """Collects unreferenced tensors and, on a CUDA device, returns its cached blocks to the driver."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
