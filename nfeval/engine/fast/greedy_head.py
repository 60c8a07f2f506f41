"""The greedy next token from a quarter of the output projection's bytes: an int8 screen, fp32 re-scoring.

On a CPU, a small model's decoding step is dominated by the (vocab × d) output projection: at batch 1
reading its fp32 weights, at batch 16 its matrix product. The screen computes every logit with fbgemm's
dynamically quantized linear (int8 weights, one scale per token; the hidden states quantized per
tensor to 7 bits), bounds each screened logit's error, and re-scores in fp32 only the tokens whose
upper bound reaches a lower bound of the largest logit: the fp32 logit of the screen's best token (no
lower than that token's screened logit less the bound). The fp32 argmax is always among them, so
greedy decoding picks the same tokens as the full fp32 product (up to fp32 rounding, as any two
matrix-product kernels differ: the tokens of near-ties within ~1e-6 of each other).

The bound, for a hidden state h and the weight row w of a token, ĥ and ŵ their quantized values, s
the activation step ((max(h, 0) − min(h, 0)) / 127: every element of h is rounded by at most s/2):
|h·w − ĥ·ŵ| ≤ |h − ĥ|∞·|w|₁ + |ĥ|₂·|w − ŵ|₂ ≤ (s/2)·max|w|₁ + (|h|₂ + √d·s/2)·max|w − ŵ|₂.
7-bit activations keep the kernel's int16 pair sums from saturating (``tests/test_greedy_head.py``
checks the bound on inputs that would show it).
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .cpu_linear import linear

# The screen keeps blocks of BLOCK tokens whose best screened logit passes, then the tokens within them:
# two small selections instead of one over the whole (B, vocab) logits.
BLOCK = 64
# If the screen lets through more than this fraction of the tokens, the full product is cheaper. Count
# tokens, not blocks: a near-flat distribution (random weights) can pass half the blocks on ~1% of the tokens.
MAX_TOKEN_FRACTION = 0.25
# Room for fp32 rounding in the quantized kernel's rescaling and in the re-scoring dot products.
ROUNDING_SLACK = 1e-4


def screen_supported(weight: torch.Tensor) -> bool:
    """Returns whether the int8 screen runs for this output projection: fp32, on a CPU whose quantized
    engine is ``x86`` or ``fbgemm`` (the engine the bound is tested under)."""
    engine = torch.backends.quantized.engine
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and engine in ("x86", "fbgemm")


class Screen(NamedTuple):
    """The int8 screen of a batch of hidden states (B rows)."""

    blocks: torch.Tensor  # screened logits (B, blocks, BLOCK), the padding tokens' -1e30
    block_max: torch.Tensor  # each block's largest (B, blocks)
    margin: torch.Tensor  # each row's bound on |screened - fp32 logit| (B,)
    threshold: torch.Tensor  # each row's: no token screened below it has the largest fp32 logit (B,)


class GreedyHead:
    """Returns the greedy next tokens (B,) of final hidden states (B, d) for a tied output projection."""

    def __init__(self, weight: torch.Tensor):
        w = weight.detach()
        vocab, padded = len(w), -(-len(w) // BLOCK) * BLOCK
        row_max, row_l1 = torch.empty(vocab), torch.empty(vocab)
        for rows in _row_chunks(vocab):
            magnitude = w[rows].abs()
            torch.amax(magnitude, 1, out=row_max[rows])
            torch.sum(magnitude, 1, out=row_l1[rows])
        scale = (row_max / 127).clamp(min=1e-12)
        bias = torch.zeros(padded)
        bias[vocab:] = -1e30  # the padding tokens never pass the screen
        with warnings.catch_warnings():  # torch marks its quantized tensors deprecated; the kernels stay
            warnings.simplefilter("ignore")
            quantized = torch.quantize_per_channel(
                F.pad(w, (0, 0, 0, padded - vocab)), F.pad(scale, (0, padded - vocab), value=1.0).double(),
                torch.zeros(padded, dtype=torch.long), 0, torch.qint8,
            )  # fmt: skip
            self.packed = torch.ops.quantized.linear_prepack(quantized, bias)
        integers = quantized.int_repr()[:vocab]
        row_error = torch.empty(vocab)
        for rows in _row_chunks(vocab):
            torch.linalg.vector_norm(w[rows] - integers[rows] * scale[rows, None], dim=1, out=row_error[rows])
        self.weight = w
        # fp32 sums of d terms: relative error far below the bound's ROUNDING_SLACK, which covers it
        self.max_l1, self.max_error = float(row_l1.max()), float(row_error.max())
        self.sqrt_d = math.sqrt(w.shape[1])

    def screen(self, hidden: torch.Tensor) -> Screen:
        """Returns the screen of hidden states (B, d): every token whose fp32 logit may be its row's
        largest has a screened logit at or above its row's threshold."""
        screened = torch.ops.quantized.linear_dynamic(hidden, self.packed, True)  # 7-bit activations
        half_step = float(hidden.max().clamp(min=0) - hidden.min().clamp(max=0)) / 254
        norm = hidden.norm(dim=1)
        slack = ROUNDING_SLACK * hidden.abs().amax(1) * self.max_l1
        margin = half_step * self.max_l1 + (norm + self.sqrt_d * half_step) * self.max_error + slack
        blocks = screened.view(len(hidden), -1, BLOCK)
        block_max = blocks.amax(2)  # one pass over the (B, vocab) logits serves the threshold and the blocks
        # the screen's best token: its fp32 logit bounds the row's largest from below (the slack, twice,
        # covers this sum's rounding and the re-scoring's), and no token screened more than the margin
        # under it can reach it; never lower than the screened maximum less twice the margin
        top, best_block = block_max.max(1)
        best = best_block * BLOCK + blocks[torch.arange(len(hidden)), best_block].argmax(1)
        known = (hidden * self.weight.index_select(0, best)).sum(1)
        threshold = torch.maximum(top - 2 * margin, known - margin - 2 * slack)
        return Screen(blocks, block_max, margin, threshold)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden.float().contiguous()
        if not bool(torch.isfinite(hidden).all()):  # the quantizer needs a finite range
            return self.full_argmax(hidden)
        blocks, block_max, _, threshold = self.screen(hidden)
        if len(hidden) == 1:
            return self.one_row(hidden, blocks.view(-1), threshold)
        block_rows, block_ids = (block_max >= threshold[:, None]).nonzero(as_tuple=True)
        if not len(block_rows):  # no block reaches the threshold: the screened logits are not finite
            return self.full_argmax(hidden)
        passed = blocks.flatten(0, 1).index_select(0, block_rows * blocks.shape[1] + block_ids)
        which, offset = (passed >= threshold.index_select(0, block_rows)[:, None]).nonzero(as_tuple=True)
        if len(which) > MAX_TOKEN_FRACTION * blocks.numel():
            return self.full_argmax(hidden)
        rows, tokens = block_rows.index_select(0, which), block_ids.index_select(0, which) * BLOCK + offset
        # every row against every candidate in one product: each candidate's weight row is read once
        candidates, column = torch.unique(tokens, return_inverse=True)
        exact = linear(hidden, self.weight.index_select(0, candidates))[rows, column]
        best = torch.full_like(threshold, -math.inf).scatter_reduce(0, rows, exact, "amax")
        ties = exact == best[rows]  # of equal best logits the lowest token, as argmax picks
        vocab = len(self.weight)
        first = torch.full_like(best, vocab, dtype=torch.long)
        first = first.scatter_reduce(0, rows[ties], tokens[ties], "amin")
        if bool((first == vocab).any()):  # a row without a best token: logits overflowed
            return self.full_argmax(hidden)
        return first

    def one_row(self, hidden: torch.Tensor, screened: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        """Returns ``__call__``'s token (1,) for one hidden state (1, d) from its screened logits: a
        decoding step at batch 1 in a third of the operations (the candidates come in token order, so
        argmax's first maximum is the lowest token among equal logits, as over the whole vocabulary)."""
        tokens = (screened >= threshold).nonzero()[:, 0]
        if not 0 < len(tokens) <= MAX_TOKEN_FRACTION * len(screened):
            return self.full_argmax(hidden)
        exact = linear(hidden, self.weight.index_select(0, tokens))
        if bool(exact.isnan().any()):  # overflowed logits: no order to pick from
            return self.full_argmax(hidden)
        return tokens.index_select(0, exact.argmax(-1))

    def full_argmax(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns the argmax of the full fp32 logits: where the screen would not pay off, or cannot run."""
        return linear(hidden, self.weight).argmax(-1)


def _row_chunks(rows: int, chunk: int = 4096) -> list[slice]:
    """Returns slices of ``chunk`` rows: the build's per-row statistics go a chunk at a time, since
    temporaries of the whole weight (51 MB for GPT-2's vocabulary) cost more in fresh pages than in
    arithmetic (the build took 0.24 s with them, 0.15 s without)."""
    return [slice(start, start + chunk) for start in range(0, rows, chunk)]


_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def greedy_head(model: torch.nn.Module) -> GreedyHead:
    """Returns the GreedyHead of ``model``'s tied output projection, built once per model and rebuilt
    only after the weight changes (another tensor, or an in-place update)."""
    weight = model.tok_emb.weight
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))
    cached = _HEADS.get(model)
    if cached is None or cached[0] != key:
        cached = (key, GreedyHead(weight))
        _HEADS[model] = cached
    return cached[1]
