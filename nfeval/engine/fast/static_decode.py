"""Decoding steps with static shapes, replayed as one CUDA graph on a GPU.

On a GPU a decoding step of a small model is bound by kernel launches, not by the GPU: Python issues
hundreds of small kernels per token. Here every step has the same shapes, so the whole step (embedding,
every layer, the output projection, the argmax) is captured once as a CUDA graph and replayed with one
launch. The shapes stay fixed because every row stays in the batch until the batch ends (a finished
row's picks are ignored), the new token's keys and values go to cache slot ``write_at`` (a tensor the
step advances) and attention reads every slot under a mask of the slots filled so far (``KVCache``).
On a CPU the same step runs eagerly, which is how the tests check it against ``generate_batch``'s
eager loop; ``Fast`` takes it on CUDA devices only. Should a capture fail, the step runs eagerly
(with a warning): slower, never different.
"""

from __future__ import annotations

import warnings

import torch

from ..inference.generate import Sampling, StopStrings, next_tokens, record
from ..model.kv_cache import KVCache
from ..model.model import Transformer


class StaticDecoder:
    """Decoding steps of ``batch_size`` rows over ``capacity`` cache slots; batches of that size reuse
    its buffers (and its captured graph): ``start`` takes each batch before its prefill."""

    def __init__(self, model: Transformer, batch_size: int, capacity: int, greedy: bool):
        weight = model.tok_emb.weight
        device = weight.device
        self.model, self.greedy = model, greedy
        self.cache = KVCache(model.cfg, batch_size, capacity, device, weight.dtype)
        for layer in self.cache.layers:  # attention reads every slot: a masked one must not hold NaN
            layer.keys.zero_()
            layer.values.zero_()
        self.tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.real = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)
        self.positions = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.write_at = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(capacity, device=device)
        self.graphed = device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None  # the graph's output: next tokens (greedy) or logits

    def start(self, real: torch.Tensor, positions: torch.Tensor, width: int) -> KVCache:
        """Takes a new batch: ``real`` and ``positions`` (B, ≤ capacity) from ``left_pad``, its prompts
        ``width`` tokens wide; returns the emptied cache for its prefill."""
        self.real.zero_()
        self.real[:, : real.shape[1]] = real
        self.positions.zero_()
        self.positions[:, : positions.shape[1]] = positions
        self.write_at.fill_(width)
        self.cache.length = 0
        return self.cache

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Decodes ``tokens`` (B,), the picks of the last step; returns the next tokens (B,) when greedy,
        else the logits (B, V) to sample from. The returned tensor is overwritten by the next step."""
        self.tokens.copy_(tokens.view(-1, 1))
        if self.graphed and self.graph is None:
            try:
                self.capture()
            except RuntimeError as e:  # the step is still right without its graph, only slower
                warnings.warn(
                    f"decoding without a CUDA graph: its capture failed ({e})", RuntimeWarning, stacklevel=2
                )
                self.graphed = False
        if not self.graphed:
            return self.run()
        self.graph.replay()
        return self.out

    def run(self) -> torch.Tensor:
        """The step itself: every op reads and writes this decoder's buffers only, as a graph needs."""
        mask = (self.real & (self.slots <= self.write_at))[:, None, None, :]
        position = self.positions.index_select(1, self.write_at)
        self.cache.write_at = self.write_at
        try:
            hidden = self.model.encode(self.tokens, position_ids=position, attn_mask=mask, cache=self.cache)
        finally:
            self.cache.write_at = None
        logits = self.model.lm_logits(hidden[:, -1])
        self.write_at.add_(1)
        return logits.argmax(-1) if self.greedy else logits

    def steps(
        self,
        tokens: torch.Tensor,
        sampling: Sampling,
        generators: list[torch.Generator | None],
        eos_id: int | None,
        stop: StopStrings | None,
        max_new_tokens: int,
    ) -> list[list[int]]:
        """Returns each row's new tokens from the steps after the prefill picked ``tokens`` (B,): every
        row stays in the batch, and a finished row's picks are ignored."""
        rows = list(range(len(tokens)))  # the rows still generating, in batch order
        new: list[list[int]] = [[] for _ in rows]
        warpers = None if sampling.greedy else sampling.warpers()
        for _ in range(max_new_tokens):
            picks = tokens.tolist()
            keep = record(new, rows, [picks[r] for r in rows], eos_id, stop, max_new_tokens)
            if not keep:
                break
            rows = [rows[j] for j in keep]
            out = self.step(tokens)
            if warpers is not None:
                tokens = torch.zeros(len(new), dtype=torch.long, device=out.device)
                tokens[rows] = next_tokens(out[rows], warpers, [generators[r] for r in rows])
            else:
                tokens = out
        return new

    def capture(self) -> None:
        """Captures ``run`` as a CUDA graph. One eager run on a side stream first (as torch's
        ``torch.cuda.graph`` asks: libraries set up their workspaces outside the capture) computes the
        step for real; the slot is then put back, so the first replay recomputes it from the same slot."""
        slot, length = self.write_at.clone(), self.cache.length
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.run()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.run()
        finally:  # the step starts from the same slot whether or not its graph was made
            self.write_at.copy_(slot)
            self.cache.length = length
        self.graph, self.out = graph, out
