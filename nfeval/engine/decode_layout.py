"""The weight layout of single-row decoding on a CPU: widening ``nn.Linear`` weights stored column-major.

``F.linear(x, W)`` multiplies ``x`` by ``W.t()``. For a weight with more outputs than inputs (q/k/v,
fc1), MKL's one- and two-row products stream the row-major ``(out, in)`` layout at ~12 GB/s on the
2-core EPYC and the column-major one (``W.t()`` row-major ``(in, out)``, the layout of GPT-2's
``Conv1D``) at 17–19 GB/s; for a narrowing weight (fc2) it is the other way round, 18 against 13 GB/s.
On the 125M shape that is 5.3 ms a token of 22 (``benchmarks/RESULTS.md``, "Generation"). From four
rows on the row-major layout is as fast or faster, so only decoding of at most ``MAX_ROWS`` rows
re-lays, and only widening weights. Values never change, only strides.

Re-laying is a transposing copy (~2.4 GB/s here, 0.08 s for the 125M shape's 197 MB of widening
weights), which pays for itself after ~20 tokens; a call that will decode fewer than ``MIN_TOKENS``
keeps the layout. Models whose re-laid weights fit in ``KEEP_BYTES`` keep their row-major tensors
aside for the way back (no second copy); larger ones are copied back, so the model's memory grows by
one weight at most.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

MAX_ROWS = 2
MIN_TOKENS = 128
KEEP_BYTES = 1 << 30


def relays(model: nn.Module, rows: int, tokens: int) -> bool:
    """Returns whether decoding ``tokens`` tokens, ``rows`` rows at a time, re-lays ``model``'s widening
    linear weights: fp32 on a CPU, at most ``MAX_ROWS`` rows, at least ``MIN_TOKENS`` tokens."""
    weight = next(model.parameters())
    on_cpu_fp32 = weight.device.type == "cpu" and weight.dtype == torch.float32
    return on_cpu_fp32 and rows <= MAX_ROWS and tokens >= MIN_TOKENS


@contextlib.contextmanager
def decode_layout(model: nn.Module, rows: int, tokens: int) -> Iterator[None]:
    """Yields with ``model``'s widening ``nn.Linear`` weights column-major when ``relays(model, rows,
    tokens)``, and gives them back their contiguous row-major layout on exit (the model trains and
    saves as before)."""
    wide = [m for m in model.modules() if isinstance(m, nn.Linear) and m.in_features < m.out_features]
    linears = wide if relays(model, rows, tokens) else []
    keep = sum(linear.weight.nbytes for linear in linears) <= KEEP_BYTES
    row_major = [linear.weight.data for linear in linears] if keep else []
    for linear in linears:
        linear.weight.data = linear.weight.data.t().contiguous().t()
    try:
        yield
    finally:
        for i, linear in enumerate(linears):
            linear.weight.data = row_major[i] if keep else linear.weight.data.contiguous()
