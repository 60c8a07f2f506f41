"""The backend for any model path nfeval scores: an nfeval checkpoint (``engine.backend.NFEvalBackend``)
or a Hugging Face causal-LM directory (``hf_backend.HFBackend``, loaded through transformers).

The path is identified, read and hashed once (``engine.loading.identify``); ``open_backend`` builds the
model from what ``identify`` read, so a cache miss does not read the weights again.
"""

from __future__ import annotations

from typing import Any

import torch

from ..engine import checkpoint
from ..engine.backend import Backend, nfeval_backend
from ..engine.loading import ModelIdentity, identify
from .hf_backend import HFBackend


def open_backend(
    model: ModelIdentity | str,
    device: torch.device,
    dtype: torch.dtype,
    fold_head_scale: bool = True,
    max_length: int | None = None,
    tokenizer: Any = None,
    trust_checkpoint: bool = False,
) -> Backend:
    """Returns the backend of ``model`` on ``device`` in ``dtype``: an identified model
    (``loading.identify``: the nfeval checkpoint it read is built, HeadScale folded when asked) or a
    path (identified here; a HF directory is not hashed, only loaded). A HF directory is loaded by
    transformers (``tokenizer``: a transformers tokenizer to use instead of the directory's)."""
    if isinstance(model, str):
        if not checkpoint.is_hf_dir(model):
            model = identify(model, trust_checkpoint=trust_checkpoint)
        else:
            return _hf_backend(model, device, dtype, max_length, tokenizer)
    if model.loaded is not None:
        return nfeval_backend(model.loaded, device, dtype, fold_head_scale, max_length)
    return _hf_backend(model.path, device, dtype, max_length, tokenizer)


def _hf_backend(path: str, device: torch.device, dtype: torch.dtype, max_length: int | None,
                tokenizer: Any) -> HFBackend:  # fmt: skip
    """Returns the HF causal-LM directory ``path`` loaded by transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    return HFBackend(model, tokenizer or AutoTokenizer.from_pretrained(path), device, max_length)
