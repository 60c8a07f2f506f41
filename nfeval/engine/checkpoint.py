"""Checkpoints: a directory with ``model.safetensors``, ``config.json`` and ``tokenizer.json``.

``config.json`` is ``{"model": <ModelConfig fields>, ...}``; other top-level keys (training config,
provenance, compute so far) are kept as ``meta``. An nfeval run directory is itself a checkpoint
directory once training has finished; while it runs, its newest ``checkpoints/step_*`` is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from ..base.artifacts import atomic_write_json, atomic_write_text
from ..base.errors import CheckpointError, ConfigError, MissingDataError
from . import rundir
from .config import ModelConfig, load_json
from .fairseq_import import load_fairseq
from .fairseq_tokenizer import dictionary_path, load_fairseq_tokenizer
from .fingerprint import fingerprint_state_dict
from .model import Transformer
from .rundir import CONFIG, TOKENIZER, WEIGHTS
from .tokenization import load_tokenizer


@dataclass
class Checkpoint:
    model: Transformer
    tokenizer: Tokenizer | None
    config: ModelConfig
    path: str
    fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)


def summary(ckpt: Checkpoint) -> dict[str, Any]:
    """Returns the model block results files carry: path, fingerprint, architecture, sizes, training
    compute."""
    cfg = ckpt.config
    return {
        "path": os.path.abspath(ckpt.path),
        "fingerprint": ckpt.fingerprint,
        "architecture": cfg.architecture,
        "objective": cfg.objective,
        "parameters": ckpt.model.num_params(),
        "n_layer": cfg.n_layer,
        "d_model": cfg.d_model,
        "compute": ckpt.meta.get("compute"),
        **({"warnings": ckpt.meta["warnings"]} if ckpt.meta.get("warnings") else {}),
    }


def save(
    directory: str,
    model: Transformer,
    tokenizer: Tokenizer | None = None,
    meta: dict[str, Any] | None = None,
) -> str:
    """Saves weights, config and tokenizer into ``directory`` (each file atomically); returns the
    fingerprint."""
    os.makedirs(directory, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    fingerprint = fingerprint_state_dict(state)
    tmp = os.path.join(directory, f".tmp-{WEIGHTS}")
    save_file(state, tmp, metadata={"format": "pt", "fingerprint": fingerprint})
    os.replace(tmp, os.path.join(directory, WEIGHTS))
    if tokenizer is not None:
        atomic_write_text(os.path.join(directory, TOKENIZER), tokenizer.to_str(pretty=True))
    atomic_write_json(
        os.path.join(directory, CONFIG),
        {**(meta or {}), "model": model.cfg.to_dict(), "fingerprint": fingerprint},
    )
    return fingerprint


def resolve(path: str) -> str:
    """Returns the checkpoint directory for ``path``: a checkpoint directory itself, a finished run
    dir itself, or an unfinished run's newest valid ``checkpoints/step_*`` (see ``rundir``)."""
    if not os.path.exists(path):
        raise MissingDataError(
            f"{path}: no such checkpoint (expected a directory with {WEIGHTS} and {CONFIG})"
        )
    has_weights = os.path.isfile(os.path.join(path, WEIGHTS))
    if has_weights and (not rundir.is_run_dir(path) or rundir.completion(path) is not None):
        return path
    newest, _ = rundir.newest_valid_checkpoint(path)
    if newest is not None:
        return newest
    raise MissingDataError(
        f"{os.path.join(path, WEIGHTS)}: not found (is {path} an nfeval run or checkpoint?)"
    )


def read_config(directory: str) -> tuple[ModelConfig, dict[str, Any]]:
    """Returns (model config, the rest of config.json) of a checkpoint directory."""
    path = os.path.join(directory, CONFIG)
    data = load_json(path)
    if "model" not in data or not isinstance(data["model"], dict):
        raise CheckpointError(f"{path}: missing object field 'model' (the model config)")
    cfg = ModelConfig.from_dict(data["model"], source=f"{path} field 'model'")
    return cfg, {k: v for k, v in data.items() if k != "model"}


def check_fingerprint(directory: str, meta: dict[str, Any], fingerprint: str) -> None:
    """Raises CheckpointError when config.json's recorded fingerprint differs from the weights' one."""
    recorded = meta.get("fingerprint")
    if recorded is not None and recorded != fingerprint:
        raise CheckpointError(
            f"{os.path.join(directory, WEIGHTS)}: fingerprint mismatch: the weights hash to "
            f"{fingerprint[:16]}…, {CONFIG} records {str(recorded)[:16]}… "
            "(the file was modified or damaged after saving)"
        )


def load_state(directory: str, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Returns the checkpoint's tensors after checking every name and shape against ``model``."""
    path = os.path.join(directory, WEIGHTS)
    try:
        state = load_file(path)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: not found") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({e})") from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(
            f"{path}: tensor {missing[0]!r} is missing"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise CheckpointError(
            f"{path}: unexpected tensor {unexpected[0]!r} (config.json does not describe it)"
        )
    for name, t in state.items():
        if t.shape != expected[name].shape:
            raise CheckpointError(
                f"{path}: tensor {name!r} has shape {tuple(t.shape)}, config.json implies "
                f"{tuple(expected[name].shape)}"
            )
    return state


def load(
    path: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    fold_head_scale: bool = False,
    fairseq_head_scale_bug: bool = False,
    trust_checkpoint: bool = False,
    verify: bool = True,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
) -> Checkpoint:
    """Returns the model (eval mode), tokenizer, config and fingerprint stored at ``path``.

    ``path`` is a checkpoint/run directory, or a fairseq checkpoint file (converted on load, unpickled
    only as far as ``trust_checkpoint`` allows; ``fairseq_head_scale_bug`` reproduces pre-2021-11-03
    HeadScale; config/weights disagreements are warned about and kept in ``meta["warnings"]``).
    The tokenizer is ``tokenizer`` (a tokenizer.json or GPT-2 folder) when given, else the checkpoint's
    ``tokenizer.json``; a fairseq file with a ``dict.txt`` beside it (or ``fairseq_dict``) and a
    ``tokenizer`` gets a ``FairseqTokenizer``: the BPE of ``tokenizer`` mapped through the dictionary.
    ``verify`` checks the weights against the fingerprint config.json recorded at save time
    (CheckpointError on a mismatch).
    ``fold_head_scale`` folds HeadScale gains into the attention output projections; the fingerprint
    stays that of the stored weights, so caches keyed by it are shared with the unfolded model.
    """
    if os.path.isfile(path):
        model, notes = load_fairseq(
            path, head_scale_transpose_bug=fairseq_head_scale_bug, trust=trust_checkpoint
        )
        directory, meta = path, {"source": "fairseq", "warnings": notes}
        dict_path = dictionary_path(path, fairseq_dict)
        if dict_path is not None and (tokenizer is not None or fairseq_dict is not None):
            meta["fairseq_dict"] = os.path.abspath(dict_path)
            tok = load_fairseq_tokenizer(dict_path, tokenizer, model.cfg.vocab_size)
        else:
            tok = _plain_tokenizer(tokenizer, os.path.dirname(path))
        state = model.state_dict()
    else:
        if fairseq_dict is not None:
            raise ConfigError(f"--fairseq-dict {fairseq_dict}: only for fairseq checkpoint files, not {path}")
        directory = resolve(path)
        cfg, meta = read_config(directory)
        model = Transformer(cfg)
        state = load_state(directory, model)
        model.load_state_dict(state)
        tok = _plain_tokenizer(tokenizer, directory)
    cfg = model.cfg
    fingerprint = fingerprint_state_dict(state)
    if verify:
        check_fingerprint(directory, meta, fingerprint)
    if fold_head_scale:
        model.fold_head_scale()
    model.to(device=device, dtype=dtype).eval()
    return Checkpoint(
        model=model, tokenizer=tok, config=cfg, path=directory, fingerprint=fingerprint, meta=meta
    )


def _plain_tokenizer(tokenizer: str | None, directory: str) -> Tokenizer | None:
    """Returns ``tokenizer`` loaded when given, else ``directory``'s tokenizer.json if any, else None."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    tok_path = os.path.join(directory, TOKENIZER)
    return load_tokenizer(tok_path) if os.path.isfile(tok_path) else None
