"""Log-probs of target tokens and greedy flags from a (vocab × d) output projection, without the logits.

A scored position needs three numbers from its logits: the target's logit, the logsumexp and whether
the target is the first maximal index (as ``argmax`` picks). The projection runs on ``ROW_CHUNK``
positions × ``VOCAB_TILE`` tokens at a time, a tile of about a core's L2 cache (1 MB), read again
while it is still there: on one CPU thread the matmul of a whole-vocabulary chunk (64 × 50,259
logits, 13 MB) ran at under half the speed of a square matmul, that of the tiles at ~95%
(``benchmarks/zeroshot_head.py``).
Each tile gives its maximum, the sum of its exponentials shifted by it and, for the positions whose
maximum it raises (strictly: the earliest tile wins a tie), its first maximal index; the tiles'
results combine into the exact argmax and, to fp32 rounding, the logsumexp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .speed import PLAIN, Speed

ROW_CHUNK = 1024  # positions per projection tile (measured on 1 thread, d=256: 1024 × 256 fastest)
VOCAB_TILE = 256  # tokens per tile on a CPU; elsewhere one tile spans the vocabulary
_LOG2_E = 1 / math.log(2)  # exp(x) = exp2(x·log2 e): torch's fp32 exp2 is about twice as fast as exp


@dataclass(frozen=True)
class VocabProjection:
    """The map from features to vocabulary logits, ``features @ weight.T + bias``; ``weight`` None when
    the features are the logits already."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None = None
    speed: Speed = PLAIN  # whose kernel computes a tile, where it offers one

    @classmethod
    def of(cls, module: torch.nn.Module | None, speed: Speed = PLAIN) -> VocabProjection | None:
        """Returns the projection of an ``nn.Linear`` output layer (None for anything else)."""
        return cls(module.weight, module.bias, speed) if isinstance(module, torch.nn.Linear) else None

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """Returns the logits of ``features`` (all of them at once: for checks, not for scoring)."""
        if self.weight is None:
            return features
        fast = self.speed.tile_product(features, self.weight, self.bias)
        return torch.nn.functional.linear(features, self.weight, self.bias) if fast is None else fast

    def vocab_size(self, features: torch.Tensor) -> int:
        """Returns the number of logits per feature row."""
        return features.shape[1] if self.weight is None else self.weight.shape[0]

    def tile(self, rows: torch.Tensor, start: int, end: int, out: torch.Tensor) -> torch.Tensor:
        """Returns the logits of ``rows`` for tokens ``start:end`` in fp32, written into ``out``
        (features' dtype for a projection, fp32 when the features are logits) unless the speed layer
        computes them (a new tensor)."""
        if self.weight is None:
            return out.copy_(rows[:, start:end])
        weight, bias = self.weight[start:end], None if self.bias is None else self.bias[start:end]
        fast = self.speed.tile_product(rows, weight, bias)
        if fast is not None:
            return fast
        if bias is None:
            return torch.mm(rows, weight.T, out=out).float()
        return torch.addmm(bias, rows, weight.T, out=out).float()


@torch.no_grad()
def target_log_probs(
    features: torch.Tensor, projection: VocabProjection, at: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (fp32 log-prob of ``target`` at feature row ``at``, int64 1 where ``target`` is not the
    argmax of that row's logits) for each (``at``, ``target``) pair; rows may repeat in ``at``."""
    n, vocab = len(features), projection.vocab_size(features)
    tile = VOCAB_TILE if features.device.type == "cpu" else vocab
    row_starts = list(range(0, n, ROW_CHUNK))
    tile_starts = list(range(0, vocab, tile))
    # pairs by (row chunk, target): the pairs of each tile are one slice, found by one searchsorted
    key = torch.div(at, ROW_CHUNK, rounding_mode="floor") * vocab + target
    order = key.argsort()
    edges = torch.tensor([c * vocab + t for c in range(len(row_starts)) for t in tile_starts + [vocab]])
    bounds = torch.searchsorted(key[order], edges.to(key.device))
    bounds = bounds.view(len(row_starts), len(tile_starts) + 1).tolist()
    sorted_at, sorted_target = at[order], target[order]
    out_dtype = torch.float32 if projection.weight is None else features.dtype
    buffer = torch.empty(min(n, ROW_CHUNK) * tile, dtype=out_dtype, device=features.device)
    token_logit = torch.empty(len(at), dtype=torch.float32, device=features.device)
    lse = torch.empty(n, dtype=torch.float32, device=features.device)
    best = torch.empty(n, dtype=torch.long, device=features.device)
    for c, start in enumerate(row_starts):
        rows = features[start : start + ROW_CHUNK]
        tile_max = torch.empty(len(tile_starts), len(rows), device=features.device)
        tile_sum = torch.empty_like(tile_max)
        run_max, run_arg = torch.full_like(tile_max[0], -math.inf), best[start : start + len(rows)]
        for k, v0 in enumerate(tile_starts):
            v1 = min(v0 + tile, vocab)
            logits = projection.tile(rows, v0, v1, buffer[: len(rows) * (v1 - v0)].view(len(rows), -1))
            pairs = slice(bounds[c][k], bounds[c][k + 1])
            token_logit[order[pairs]] = logits[sorted_at[pairs] - start, sorted_target[pairs] - v0]
            top = torch.amax(logits, 1, out=tile_max[k])
            _raise_max(logits, top, run_max, run_arg, v0)
            shifted = logits.sub_(top[:, None]).mul_(_LOG2_E).exp2_()
            torch.sum(shifted, 1, out=tile_sum[k])
        lse[start : start + len(rows)] = run_max + (tile_sum * (tile_max - run_max).exp_()).sum(0).log_()
    return token_logit - lse[at], (best[at] != target).to(torch.int64)


def _raise_max(logits, top, run_max, run_arg, offset: int) -> None:
    """Updates the running maximum and its first index in place, for the rows whose tile maximum
    ``top`` exceeds it (``argmax`` is a scalar loop on a CPU: a row's maximum rises in few tiles)."""
    raised = (top > run_max).nonzero()[:, 0]
    if len(raised) == len(top):
        torch.add(logits.argmax(1), offset, out=run_arg)
        run_max.copy_(top)
    elif len(raised):
        run_arg[raised] = logits[raised].argmax(1) + offset
        run_max[raised] = top[raised]
