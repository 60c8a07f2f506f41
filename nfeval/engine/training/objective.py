"""The training objective (model + ``Transformer.loss`` summed, in one forward) and the validation loss."""

from __future__ import annotations

import torch
from torch import nn

from ..model.model import Transformer
from ..text.data import Batches
from .parallel import Strategy


class Objective(nn.Module):
    """The model plus its loss in one forward, so DDP, FSDP2 and torch.compile wrap a single call.

    Returns the summed cross-entropy over targets != -100 (the caller divides by the global count).
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model.loss(idx, targets, reduction="sum")


def evaluate(
    obj: nn.Module, batches: Batches, n: int, batch_size: int, mask_seed: int, bf16: bool, par: Strategy
) -> float:
    """Returns the mean validation loss over the first ``n`` validation samples, computed in shards
    over the processes (every process runs the same number of forwards, as FSDP2 needs) and summed.

    The samples and their MLM masks are drawn at once, so they depend on neither the batch size nor
    the number of processes."""
    obj.eval()
    x_all, y_all = batches.get(0, n, mask_seed=mask_seed)
    count = max(int((y_all != -100).sum()), 1)
    shard = -(-n // par.world)
    mine = slice(par.rank * shard, min((par.rank + 1) * shard, n))
    x_mine, y_mine = x_all[mine], y_all[mine]
    total = torch.zeros((), device=par.device, dtype=torch.float64)
    with torch.no_grad(), torch.autocast(par.device.type, dtype=torch.bfloat16, enabled=bf16):
        for start in range(0, shard, batch_size):
            x, y = x_mine[start : start + batch_size], y_mine[start : start + batch_size]
            if len(x) == 0:  # this shard ran out: a forward with no targets keeps the collectives in step
                x, y = x_all[:1], torch.full_like(y_all[:1], -100)
            total += obj(x.to(par.device), y.to(par.device)).double()
    obj.train()
    return float(par.all_reduce(total)) / count
