"""Whether a model's last layer depends on its input: two numbers read at initialisation (or from any
model) on a batch of real token ids, and the rule that flags a stack blind to its input.

- **Cosine across positions**: the mean cosine similarity between the last block's output states of two
  distinct positions of one sequence (every pair), averaged over the batch. Near 1: every position
  carries the same state (rank collapse), so the head can only learn a distribution that ignores the
  context.
- **Own-token change**: ``||h'_t − h_t|| / ||h_t||`` at a sampled position ``t`` when the token at ``t``
  alone is replaced by another id drawn at random, averaged over the sampled positions. Near 0: the
  state at ``t`` barely depends on the token there.

Both read the last block's output *before* the final norm: the same point in every scheme (Post-LN and
DeepNorm have no final norm; their blocks already end with one), and the final norm is a per-position
rescaling and centring that cannot give back what the stack lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine.model.config import ModelConfig
from ..engine.model.model import Transformer

# A stack is flagged when its positions' last states are this alike, or a token moves its own state less
COSINE_LIMIT = 0.9
CHANGE_LIMIT = 0.10


@dataclass(frozen=True)
class TokenSensitivity:
    """The two measurements of one model on one batch (see the module's docstring)."""

    name: str
    position_cosine: float  # mean cosine between distinct positions' last-layer states
    own_token_change: float  # mean ||h'_t − h_t|| / ||h_t|| when the token at t is replaced
    samples: int  # positions whose token was replaced

    @property
    def flagged(self) -> bool:
        """Whether the last layer is blind to its input (``flagged``)."""
        return flagged(self.position_cosine, self.own_token_change)

    def text(self) -> str:
        """Returns the one line a report prints, e.g. "hybridnorm: cosine across positions 0.993, own-token
        change 6.5% — FLAGGED: the last layer barely depends on its input"."""
        line = (
            f"{self.name}: cosine across positions {self.position_cosine:.3f}, "
            f"own-token change {100 * self.own_token_change:.1f}%"
        )
        return line + (" — FLAGGED: the last layer barely depends on its input" if self.flagged else "")

    def to_dict(self) -> dict[str, object]:
        """Returns the JSON-able record (the fields and ``flagged``)."""
        return {
            "name": self.name,
            "position_cosine": self.position_cosine,
            "own_token_change": self.own_token_change,
            "samples": self.samples,
            "flagged": self.flagged,
        }


def flagged(position_cosine: float, own_token_change: float) -> bool:
    """Returns whether a stack is blind to its input: its positions' last states more alike than
    ``COSINE_LIMIT`` or a token moving its own state by less than ``CHANGE_LIMIT``."""
    return position_cosine > COSINE_LIMIT or own_token_change < CHANGE_LIMIT


def last_layer_states(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """Returns the last block's output (B, T, d) for ``idx`` (B, T), before the final norm."""
    captured: list[torch.Tensor] = []
    hook = model.blocks[-1].register_forward_hook(lambda _m, _args, out: captured.append(out))
    try:
        with torch.no_grad():
            model.encode(idx)
    finally:
        hook.remove()
    return captured[0].float()


def position_cosine(states: torch.Tensor) -> float:
    """Returns the mean cosine similarity between the states (B, T, d) of distinct positions of one row,
    every pair, averaged over the rows."""
    T = states.shape[1]
    if T < 2:
        raise ValueError("the cosine across positions needs at least 2 positions")
    unit = torch.nn.functional.normalize(states.double(), dim=-1)
    sims = unit @ unit.transpose(1, 2)  # B, T, T
    off_diagonal = sims.sum(dim=(1, 2)) - sims.diagonal(dim1=1, dim2=2).sum(-1)
    return float((off_diagonal / (T * (T - 1))).mean())


def own_token_change(
    model: Transformer, idx: torch.Tensor, states: torch.Tensor, samples: int, generator: torch.Generator
) -> float:
    """Returns the mean relative change ``||h'_t − h_t|| / ||h_t||`` of the last-layer state at ``samples``
    positions (row and position drawn from ``generator``), each after replacing that position's token
    by another id drawn uniformly from the rest of the vocabulary; ``states`` are ``idx``'s own."""
    B, T = idx.shape
    rows = torch.randint(0, B, (samples,), generator=generator)
    cols = torch.randint(0, T, (samples,), generator=generator)
    vocab = model.cfg.vocab_size
    shift = torch.randint(1, vocab, (samples,), generator=generator)
    changed = idx[rows].clone()
    picked = torch.arange(samples)
    changed[picked, cols] = (changed[picked, cols] + shift) % vocab  # never the original id
    after = torch.cat([last_layer_states(model, part) for part in changed.split(64)])
    new = after[picked, cols].double()
    old = states[rows, cols].double()
    return float(((new - old).norm(dim=-1) / old.norm(dim=-1)).mean())


def token_sensitivity(
    model: Transformer, idx: torch.Tensor, *, samples: int = 64, seed: int = 0, name: str | None = None
) -> TokenSensitivity:
    """Returns the cosine across positions and the own-token change of ``model`` (put in eval mode) on
    the token ids ``idx`` (B, T), its ``samples`` replaced positions drawn under ``seed``; ``name``
    (default: the model's architecture) heads the report line."""
    model.eval()
    states = last_layer_states(model, idx)
    generator = torch.Generator().manual_seed(seed)
    change = own_token_change(model, idx, states, samples, generator)
    return TokenSensitivity(name or model.cfg.architecture, position_cosine(states), change, samples)


def sensitivity_at_init(
    cfg: ModelConfig, idx: torch.Tensor, *, seed: int = 0, samples: int = 64, name: str | None = None
) -> TokenSensitivity:
    """Returns ``token_sensitivity`` of a model of ``cfg`` as its ``init`` draws it under
    ``torch.manual_seed(seed)`` (the global RNG state is restored afterwards)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(cfg)
    return token_sensitivity(model, idx, samples=samples, seed=seed, name=name)


def token_batch(tokens: np.ndarray, batch: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """Returns ``batch`` windows of ``seq_len`` consecutive ids (B, T, int64) of a token stream (e.g. a
    run's training shard), their starts drawn under ``seed``."""
    if len(tokens) <= seq_len:
        raise ValueError(f"a stream of {len(tokens)} tokens has no window of {seq_len}")
    starts = np.random.default_rng(seed).integers(0, len(tokens) - seq_len, size=batch)
    return torch.from_numpy(np.stack([np.asarray(tokens[s : s + seq_len], dtype=np.int64) for s in starts]))
