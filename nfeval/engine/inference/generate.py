"""Batched generation with the KV cache: greedy or sampled, ragged prompts, EOS and stop strings.

A batch's prompts are left-padded to a common width, so that every row's next token sits in the
same column. The padding is hidden by an attention mask (a pad query sees only itself, so no row of
the softmax is empty), and positions count real tokens only, so a row generates exactly what it
would generate alone. A row that ends (EOS, a stop string, ``max_new_tokens``) leaves the batch and
its cache rows are dropped. Only the last position's hidden state reaches the output projection.
Sampling uses transformers' logits warpers (temperature, top-k, top-p) and one ``torch.Generator``
per prompt seeded ``seed + prompt index``, so a sample does not depend on the batch size or on which
prompts share its batch. The weights keep the dtype they come with: bf16 decoding happens only when
the caller loads bf16 weights.

``speed`` (``inference.speed``) is where the speed layer enters: ``engine.fast`` gives a call packed
CPU weights, an int8-screened greedy head and, on a GPU, steps replayed as a CUDA graph; the plain
default computes the full logits with torch's kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ...base.config_flags import flag_field
from ...base.errors import ConfigError, DataError
from ...base.progress import progress_bar
from ..model.kv_cache import KVCache
from ..model.model import Transformer
from .speed import PLAIN, Speed


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked: greedy when ``temperature`` is 0, else sampled."""

    temperature: float = flag_field(0.0, "0 (default): greedy")
    top_k: int = flag_field(0, "sample from the K most likely tokens (0: off)")
    top_p: float = flag_field(1.0, "nucleus sampling mass (1: off)")
    seed: int = flag_field(0, "prompt i samples with seed + i")

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"temperature={self.temperature}: expected a finite number >= 0 (0 is greedy)")
        if self.top_k < 0:
            raise ConfigError(f"top_k={self.top_k}: expected >= 0 (0 is off)")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p={self.top_p}: expected a value in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def warpers(self):
        """Returns transformers' LogitsProcessorList for temperature, top-k and top-p (in HF's order)."""
        from transformers.generation import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        warpers = LogitsProcessorList([TemperatureLogitsWarper(self.temperature)])
        if self.top_k:
            warpers.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1:
            warpers.append(TopPLogitsWarper(self.top_p))
        return warpers


class StopStrings:
    """Says whether new tokens contain a stop string. Decodes only a tail of the tokens, which holds
    any stop string that the newest token completed, and confirms a hit on the whole text."""

    def __init__(self, stops: Sequence[str], decode: Callable[[list[int]], str]):
        self.stops = [s for s in stops if s]
        self.decode = decode
        self.tail = max((len(s.encode("utf-8")) for s in self.stops), default=0) + 2

    def __bool__(self) -> bool:
        return bool(self.stops)

    def hit(self, tokens: list[int]) -> bool:
        tail = self.decode(tokens[-self.tail :])
        if not any(s in tail for s in self.stops):
            return False
        text = self.decode(tokens)
        return any(s in text for s in self.stops)


def next_tokens(logits: torch.Tensor, warpers, generators: list[torch.Generator | None]) -> torch.Tensor:
    """Returns one token id per row of ``logits`` (B, V): the argmax when ``warpers`` is None (greedy),
    else a sample from the warped distribution with row r's generator."""
    if warpers is None:
        return logits.argmax(-1)
    probs = warpers(None, logits.float()).softmax(-1)
    return torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, generators)])


def token_picker(
    model: Transformer, sampling: Sampling, speed: Speed = PLAIN
) -> Callable[[torch.Tensor, list], torch.Tensor]:
    """Returns pick(hidden (B, d), generators) -> next tokens (B,): ``speed``'s greedy picker where it
    has one, else the full logits through ``next_tokens``."""
    head = speed.greedy_picker(model) if sampling.greedy else None
    if head is not None:
        return lambda hidden, generators: head(hidden)
    warpers = None if sampling.greedy else sampling.warpers()
    return lambda hidden, generators: next_tokens(model.lm_logits(hidden), warpers, generators)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, extra: int, device) -> tuple[torch.Tensor, ...]:
    """Returns (ids (B, W), real (B, W + extra) True at tokens, positions (B, W + extra)) for left padding."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    real = torch.ones((len(prompts), width + extra), dtype=torch.bool)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        real[r, : width - len(p)] = False
    positions = (real.long().cumsum(1) - 1).clamp(min=0)
    return ids.to(device), real.to(device), positions.to(device)


def prefill_mask(real: torch.Tensor, width: int) -> torch.Tensor:
    """Returns the (B, 1, W, W) prompt mask: causal, real keys only, and each pad query sees itself."""
    causal = torch.ones(width, width, dtype=torch.bool, device=real.device).tril()
    eye = torch.eye(width, dtype=torch.bool, device=real.device)
    return ((causal & real[:, None, :width]) | eye)[:, None]


def record(
    new: list[list[int]],
    rows: list[int],
    picks: list[int],
    eos_id: int | None,
    stop: StopStrings | None,
    max_new_tokens: int,
) -> list[int]:
    """Appends each row's pick (``picks[j]`` is prompt ``rows[j]``'s) to its new tokens; returns the
    indices j of the rows that go on: not at EOS (not appended), a stop string or ``max_new_tokens``."""
    keep = []
    for j, (r, t) in enumerate(zip(rows, picks)):
        if t == eos_id:
            continue
        new[r].append(t)
        if len(new[r]) < max_new_tokens and not (stop and stop.hit(new[r])):
            keep.append(j)
    return keep


@torch.no_grad()
def generate_batch(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    sampling: Sampling,
    generators: list[torch.Generator | None],
    eos_id: int | None = None,
    stop: StopStrings | None = None,
    pad_id: int = 0,
    decoder=None,
    speed: Speed = PLAIN,
) -> list[list[int]]:
    """Returns each prompt's new tokens (EOS excluded; the tokens that complete a stop string kept).
    With ``decoder`` (``Speed.batch_decoder``'s, sized for this batch) the steps after the prefill are
    its own."""
    device, dtype = model.tok_emb.weight.device, model.tok_emb.weight.dtype
    ids, real, positions = left_pad(prompts, pad_id, max_new_tokens, device)
    width = ids.shape[1]
    padded = not bool(real.all())
    if decoder is not None:
        cache = decoder.start(real, positions, width)
    else:
        cache = KVCache(model.cfg, len(prompts), width + max_new_tokens, device, dtype)
    mask = prefill_mask(real, width) if padded else None
    hidden = model.encode(
        ids, position_ids=positions[:, :width] if padded else None, attn_mask=mask, cache=cache
    )
    pick = token_picker(model, sampling, speed)
    tokens = pick(hidden[:, -1], generators)
    if decoder is not None:
        return decoder.steps(tokens, sampling, generators, eos_id, stop, max_new_tokens)
    rows = list(range(len(prompts)))  # the prompts still generating, in batch order
    new: list[list[int]] = [[] for _ in prompts]
    # the steps' mask as the float SDPA adds to the scores (0 at tokens, -inf at padding): what SDPA would
    # make of a bool mask at every call of every layer, made once
    bias = torch.zeros(real.shape, dtype=dtype, device=device).masked_fill_(~real, -math.inf)
    for _ in range(max_new_tokens):
        keep = record(new, rows, tokens.tolist(), eos_id, stop, max_new_tokens)
        if not keep:
            break
        if len(keep) < len(rows):  # finished rows stop costing compute
            kept = torch.tensor(keep, device=device)
            rows, tokens = [rows[j] for j in keep], tokens[kept]
            bias, positions = bias[kept], positions[kept]
            cache.keep_rows(kept)
        n = cache.length
        step_mask = bias[:, None, None, : n + 1] if padded else None
        step_pos = positions[:, n : n + 1] if padded else None
        hidden = model.encode(tokens[:, None], position_ids=step_pos, attn_mask=step_mask, cache=cache)
        tokens = pick(hidden[:, -1], [generators[r] for r in rows])
    return new


def check_request(
    context: int | None,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    batch_size: int,
    undecodable_stop: bool = False,
) -> None:
    """Raises ConfigError/DataError, before any work, on a request a generator cannot serve (``context``:
    the model's context window, None: not checked here)."""
    if max_new_tokens < 1 or batch_size < 1:
        raise ConfigError(f"max_new_tokens={max_new_tokens}, batch_size={batch_size}: expected >= 1 each")
    if undecodable_stop:
        raise ConfigError("stop strings need a decode function")
    for i, p in enumerate(prompts):
        if not p:
            raise DataError(f"prompt {i} is empty: expected at least one token")
        if context is not None and len(p) + max_new_tokens > context:
            raise DataError(
                f"prompt {i}: {len(p)} tokens + max_new_tokens {max_new_tokens} exceed the model's "
                f"context window ({context})"
            )


def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    sampling: Sampling = Sampling(),
    eos_id: int | None = None,
    stop: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
    batch_size: int = 16,
    pad_id: int = 0,
    progress: bool = False,
    speed: Speed = PLAIN,
) -> list[list[int]]:
    """Returns the new tokens of each prompt (token-id lists), generated ``batch_size`` prompts at a time.

    A row ends at ``eos_id`` (not included), at a stop string (``decode`` turns tokens into text; the
    tokens that complete it are included, cut the text yourself) or after ``max_new_tokens``.
    ``speed``: the speed layer's answers (``inference.speed``; ``engine.fast.Fast`` for the fast path).
    """
    check_request(model.cfg.max_seq_len, prompts, max_new_tokens, batch_size, bool(stop) and decode is None)
    device = model.tok_emb.weight.device
    generators = [
        None if sampling.greedy else torch.Generator(device).manual_seed(sampling.seed + i)
        for i in range(len(prompts))
    ]
    stops = StopStrings(stop, decode) if stop else None
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # similar lengths share a batch
    results: list[list[int]] = [[] for _ in prompts]
    steps = -(-len(prompts) // batch_size) * max_new_tokens
    capacity = max(len(p) for p in prompts) + max_new_tokens  # one size, so that batches share a decoder
    decoders: dict[int, object] = {}
    bar = progress_bar(total=len(prompts), desc="Generating", enabled=progress)
    with speed.holding_weights(model, steps, rows=min(batch_size, len(prompts))), bar:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            if len(chunk) not in decoders:
                decoders[len(chunk)] = speed.batch_decoder(model, len(chunk), capacity, sampling.greedy)
            outs = generate_batch(
                model,
                [prompts[i] for i in chunk],
                max_new_tokens,
                sampling,
                [generators[i] for i in chunk],
                eos_id,
                stops,
                pad_id,
                decoders[len(chunk)],
                speed,
            )
            for i, out in zip(chunk, outs):
                results[i] = out
            bar.update(len(chunk))
    return results
