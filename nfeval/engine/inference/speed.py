"""The seams where the speed layer enters scoring and decoding, and the plain path behind them.

Scoring and generation ask a ``Speed`` four things: the kernel of an output-projection tile, a context
to hold the weights in while many forward passes run, the greedy next token without the full logits,
and a decoder that runs a batch's steps after its prefill. ``Speed`` itself answers each with the plain
path: torch's products, the weights as built, the full logits, and ``generate_batch``'s own loop. The
speed layer (``engine.fast``: ``fast.accelerate`` applied to a built backend) answers them faster with
the same values, so the model and the scorer read as plain torch whichever runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch


class Speed:
    """The plain path: every answer is None, or changes nothing."""

    name = "plain"

    def linear_kernel(self, decoding_rows: int | None = None) -> str:
        """Returns the kernel of fp32 CPU linear products, for run records (``decoding_rows``: rows a
        decoding step, when generating)."""
        return "torch"

    def tile_product(
        self, rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Returns the logits of ``rows`` for a slice of the output projection, or None where the caller's
        own product (into its buffer) is the one to run."""
        return None

    def holding_weights(self, model: torch.nn.Module, steps: int, rows: int | None = None):
        """Returns a context within which ``model`` runs ``steps`` forward passes of ``rows`` rows."""
        return contextlib.nullcontext()

    def greedy_picker(self, model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Returns pick(hidden (B, d)) -> the greedy next tokens (B,), or None: the full logits' argmax."""
        return None

    def batch_decoder(self, model: torch.nn.Module, batch_size: int, capacity: int, greedy: bool) -> Any:
        """Returns a decoder that runs the steps after a batch's prefill (``start``, ``steps``: see
        ``engine.fast.static_decode``), or None: ``generate_batch``'s own loop."""
        return None


PLAIN = Speed()
