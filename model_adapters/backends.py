"""The backend for any model path nfeval scores: an nfeval checkpoint
(``engine.inference.backend.NFEvalBackend``)
or a Hugging Face causal-LM directory: a GPT-2 the engine reproduces in the engine
(``engine.fast.hf_gpt2_backend``), anything else loaded through transformers (``hf_backend.HFBackend``),
each with the speed layer (``engine.fast.accelerate``).

The path is identified, read and hashed once (``engine.checkpoints.loading.identify``); ``open_backend``
builds the
model from what ``identify`` read, so a cache miss does not read the weights again.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any

import torch

from ..base.errors import CheckpointError, ConfigError, DataError, UserError
from ..engine.checkpoints import checkpoint
from ..engine.checkpoints.loading import ModelIdentity, identify
from ..engine.fast.hf_gpt2_backend import hf_gpt2_backend
from ..engine.fast.speed import accelerate
from ..engine.inference.backend import Backend, nfeval_backend
from .hf_backend import HFBackend

HF_FORWARDS = ("engine", "transformers")  # engine: GPT-2 directories the engine reproduces


def open_backend(
    model: ModelIdentity | str,
    device: torch.device,
    dtype: torch.dtype,
    fold_head_scale: bool = True,
    max_length: int | None = None,
    tokenizer: Any = None,
    trust_checkpoint: bool = False,
    hf_forward: str = "engine",
) -> Backend:
    """Returns the backend of ``model`` on ``device`` in ``dtype``: an identified model
    (``loading.identify``: the nfeval checkpoint it read is built, HeadScale folded when asked) or a
    path (identified here; a HF directory is not hashed, only loaded). A HF directory is loaded by
    the engine when it is a GPT-2 the engine reproduces and ``hf_forward`` is "engine", else by
    transformers (``tokenizer``: a transformers tokenizer to use instead of the directory's)."""
    if hf_forward not in HF_FORWARDS:
        raise ConfigError(f"hf_forward={hf_forward!r}: expected one of {HF_FORWARDS}")
    if isinstance(model, str) and not checkpoint.is_hf_dir(model):
        model = identify(model, trust_checkpoint=trust_checkpoint)
    if isinstance(model, str):
        backend = _hf_backend(model, device, dtype, max_length, tokenizer, hf_forward)
    elif model.loaded is not None:
        backend = nfeval_backend(model.loaded, device, dtype, fold_head_scale, max_length)
    else:
        backend = _hf_backend(model.path, device, dtype, max_length, tokenizer, hf_forward)
    return accelerate(backend)


def _hf_backend(path: str, device: torch.device, dtype: torch.dtype, max_length: int | None,
                tokenizer: Any, hf_forward: str) -> Backend:  # fmt: skip
    """Returns the HF causal-LM directory ``path`` in the engine (see ``hf_gpt2_backend``) or loaded by
    transformers. A folder that asks to run its own code, or whose weights are a pickle holding more than
    tensors, is refused in one line (``checkpoint.refuse_hf_code``), never half-loaded."""
    checkpoint.refuse_hf_code(path)
    if tokenizer is None and hf_forward == "engine":
        backend = hf_gpt2_backend(path, device, dtype, max_length)
        if backend is not None:
            return backend
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _loaded_by_transformers(path, "model"):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    with _loaded_by_transformers(path, "tokenizer"):
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
    return HFBackend(model, tokenizer, device, max_length)


@contextlib.contextmanager
def _loaded_by_transformers(path: str, what: str) -> Iterator[None]:
    """Within the block, transformers' failure to load ``what`` from the folder ``path`` (a config of
    another model type or with mistyped fields, damaged weights or tokenizer files, a tokenizer that
    needs a library not installed) is a one-line CheckpointError naming the folder, never a traceback
    (``NFEVAL_TRACEBACK=1`` shows the cause); a pickle of more than tensors is refused as such."""
    try:
        yield
    except UserError:
        raise
    except pickle.UnpicklingError as e:  # transformers reads .bin weights with weights_only=True
        raise DataError(
            f"{path}: its weights file is a pickle holding Python objects besides tensors, which could run "
            f"code when loaded ({str(e).splitlines()[0][:120]}); refused: no flag loads it, convert the "
            "weights to safetensors where you trust the file"
        ) from None
    except Exception as e:  # the block is transformers' loader alone: what fails there is the folder's
        raise _unloadable(path, what, e) from e


def _unloadable(path: str, what: str, error: BaseException) -> CheckpointError:
    """Returns the one-line error of a Hugging Face folder whose ``what`` transformers cannot load."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return CheckpointError(
        f"{path}: transformers cannot load its {what} ({type(error).__name__}: {first[:200]}); expected a "
        "Hugging Face causal-LM folder it reads"
    )
