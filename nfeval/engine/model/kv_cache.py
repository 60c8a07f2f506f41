"""The key/value cache of incremental decoding: every layer's keys and values, allocated once."""

from __future__ import annotations

import torch

from .config import ModelConfig


class LayerCache:
    """One layer's keys and values (B, H, capacity, head_dim); the first ``KVCache.length`` are filled."""

    def __init__(self, owner: KVCache, keys: torch.Tensor, values: torch.Tensor):
        self.owner, self.keys, self.values = owner, keys, values

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores the new tokens' keys/values after the cached ones; returns all of them so far (every
        slot, for the caller's mask to hide the unfilled ones, while ``KVCache.write_at`` is set)."""
        write_at = self.owner.write_at
        if write_at is not None:  # static shapes: the slot is a tensor, so a CUDA graph can replay this
            self.keys.index_copy_(2, write_at, k)
            self.values.index_copy_(2, write_at, v)
            return self.keys, self.values
        start, end = self.owner.length, self.owner.length + k.shape[2]
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """Keys and values of every layer for the tokens seen so far, in buffers allocated once.

    ``Transformer.encode`` appends the new tokens to every layer, then advances ``length``. While
    ``write_at`` (a one-element LongTensor) is set, one new token goes to slot ``write_at`` instead and
    attention reads every slot (``fast.static_decode``, which zeroes the buffers first, so that an
    unfilled slot holds no NaN for the mask to multiply).
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, capacity: int, device=None, dtype=None):
        if capacity > cfg.max_seq_len:
            raise ValueError(f"cache capacity {capacity} exceeds max_seq_len {cfg.max_seq_len}")
        shape = (batch_size, cfg.n_head, capacity, cfg.head_dim)
        self.capacity, self.length = capacity, 0
        self.write_at: torch.Tensor | None = None
        self.layers = [
            LayerCache(
                self,
                torch.empty(shape, device=device, dtype=dtype),
                torch.empty(shape, device=device, dtype=dtype),
            )
            for _ in range(cfg.n_layer)
        ]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps only the batch rows ``rows`` (a LongTensor of indices), e.g. to drop finished ones."""
        for layer in self.layers:
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
