"""The speed layer's answers to scoring and decoding (``inference.speed``), and the one function that
gives them to a built backend."""

from __future__ import annotations

from ..inference.backend import Backend
from ..inference.speed import Speed
from ..model.model import Transformer
from . import cpu_linear, greedy_head
from .static_decode import StaticDecoder


class Fast(Speed):
    """oneDNN's CPU products and packed weights (``cpu_linear``), the int8-screened greedy head on a CPU
    (``greedy_head``; ``greedy_screen=False``: the full logits) and static decoding steps
    (``static_decode``; ``static`` None: on a CUDA device, where launches bound a step, and not on a CPU,
    where dropping finished rows and the screened head pay more)."""

    name = "fast"

    def __init__(self, static: bool | None = None, greedy_screen: bool = True):
        self.static, self.greedy_screen = static, greedy_screen

    def linear_kernel(self, decoding_rows: int | None = None) -> str:
        return cpu_linear.describe(decoding_rows)

    def tile_product(self, rows, weight, bias):
        return cpu_linear.linear(rows, weight, bias) if cpu_linear.takes_onednn(rows, weight, bias) else None

    def holding_weights(self, model, steps, rows=None):
        return cpu_linear.packed_weights(model, steps, rows)

    def greedy_picker(self, model):
        if not (self.greedy_screen and isinstance(model, Transformer)):
            return None
        tied = model.cfg.objective == "clm" and model.logit_scale is None  # the head is tok_emb's weight
        if not (tied and greedy_head.screen_supported(model.tok_emb.weight)):
            return None
        return greedy_head.greedy_head(model)

    def batch_decoder(self, model, batch_size, capacity, greedy):
        static = model.tok_emb.weight.device.type == "cuda" if self.static is None else self.static
        return StaticDecoder(model, batch_size, capacity, greedy) if static else None


def accelerate(backend: Backend, speed: Fast | None = None) -> Backend:
    """Returns ``backend`` (changed in place) with the speed layer: an engine model's linears converted
    (``cpu_linear.convert``) and ``speed`` (default ``Fast()``) answering its scoring and decoding.
    Applying it again changes nothing."""
    if isinstance(backend.model, Transformer):
        cpu_linear.convert(backend.model)
    backend.speed = speed or Fast()
    return backend
