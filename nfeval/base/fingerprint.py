"""Fingerprints: the sha256 of a model's weights and of a tokenizer, the keys every cache and results
file is filed under. One formula each, whatever route a model or tokenizer was loaded by."""

from __future__ import annotations

import hashlib
import json

import torch
from tokenizers import Tokenizer


def fingerprint_state_dict(state: dict[str, torch.Tensor]) -> str:
    """Returns the sha256 of the weights: names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())  # the tensor's own buffer, not a copy
    return h.hexdigest()


def fingerprint_model(model: torch.nn.Module) -> str:
    """Returns the fingerprint of a model's current weights (as they would be saved)."""
    return fingerprint_state_dict(model.state_dict())


def canonical_tokenizer_json(tok: Tokenizer) -> str:
    """Returns the tokenizer as canonical JSON (key order and whitespace do not count)."""
    return json.dumps(json.loads(tok.to_str()), sort_keys=True)


def fingerprint_tokenizer(tok: Tokenizer) -> str:
    """Returns the sha256 of the tokenizer's canonical JSON."""
    return hashlib.sha256(canonical_tokenizer_json(tok).encode()).hexdigest()
