"""Path → model, one way for every command that takes ``--ckpt`` (zeroshot, generate, info, analyze).

``identify`` decides the format once (``checkpoint.is_hf_dir``), reads and hashes the weights once, and
returns a ``ModelIdentity``: the fingerprint results are cached under, the model block results files
carry, and for nfeval formats the read ``Checkpoint`` itself, so that a caller which goes on to build
the model (``checkpoint.materialize``, ``backend.nfeval_backend``) reads nothing again. A Hugging Face
model directory is identified by the hashes of its files; transformers loads it
(``model_adapters.backends``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ...base.errors import ConfigError, MissingDataError
from ...base.fingerprint import fingerprint_tokenizer
from ...base.jsonio import load_json
from . import checkpoint

HF_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
HF_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)


@dataclass
class ModelIdentity:
    """What a model path is, and the fingerprint results are cached under."""

    kind: str  # "nfeval" | "hf"
    path: str
    fingerprint: str
    summary: dict[str, Any] = field(default_factory=dict)
    loaded: checkpoint.Checkpoint | None = None  # nfeval formats: read, not yet built
    tokenizer_files: list[str] = field(default_factory=list)  # a HF directory's non-weight files

    @functools.cached_property
    def tokenizer_fingerprint(self) -> str:
        """The tokenizer's fingerprint ("none": a checkpoint without a tokenizer), computed when first read:
        hashing a BPE's canonical JSON takes a quarter of a second, which generation does not need."""
        if self.loaded is None:
            return hash_files(self.tokenizer_files)
        tokenizer = self.loaded.tokenizer
        return "none" if tokenizer is None else fingerprint_tokenizer(tokenizer)


def identify(
    path: str,
    trust_checkpoint: bool = False,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
    fairseq_head_scale_bug: bool = False,
    verify: bool = True,
    allow_hf: bool = True,
) -> ModelIdentity:
    """Returns the kind, fingerprint, summary and (nfeval formats) the read checkpoint of the model at
    ``path``: an nfeval run/checkpoint dir, an export-hf folder, a fairseq file or a HF model dir.
    The arguments are as ``checkpoint.read`` takes them; weights that do not match the fingerprint
    recorded in config.json (when ``verify``), or a truncated weights file, raise CheckpointError;
    so does a HF directory when not ``allow_hf`` (for the commands that read nfeval formats only)."""
    if allow_hf and checkpoint.is_hf_dir(path):
        if tokenizer is not None or fairseq_dict is not None:
            raise ConfigError(
                f"{path}: a Hugging Face model uses its own tokenizer (drop --tokenizer/--fairseq-dict)"
            )
        return _identify_hf(path)
    ckpt = checkpoint.read(
        path, trust_checkpoint=trust_checkpoint, tokenizer=tokenizer, fairseq_dict=fairseq_dict,
        fairseq_head_scale_bug=fairseq_head_scale_bug, verify=verify,
    )  # fmt: skip
    return ModelIdentity(
        kind="nfeval",
        path=os.path.abspath(ckpt.path),
        fingerprint=ckpt.fingerprint,
        summary=checkpoint.summary(ckpt),
        loaded=ckpt,
    )


def hash_files(paths: list[str]) -> str:
    """Returns the sha256 over the names and bytes of ``paths`` (in the given order)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def hf_files(path: str) -> list[str]:
    """Returns the files of a HF model directory that decide its outputs: weights, config, tokenizer."""
    names = sorted(os.listdir(path))
    picked = [
        n for n in names if n.endswith(HF_WEIGHT_SUFFIXES) or n in HF_FILES or n.endswith(".index.json")
    ]
    return [os.path.join(path, n) for n in picked if os.path.isfile(os.path.join(path, n))]


def _identify_hf(path: str) -> ModelIdentity:
    """Returns the identity of a Hugging Face model directory (hashes of its weight and tokenizer files)."""
    files = hf_files(path)
    weights = [f for f in files if f.endswith(HF_WEIGHT_SUFFIXES)]
    if not weights:
        raise MissingDataError(
            f"{path}: Hugging Face model directory without weight files (*.safetensors / *.bin)"
        )
    cfg = load_json(os.path.join(path, "config.json"))
    return ModelIdentity(
        kind="hf",
        path=os.path.abspath(path),
        fingerprint=hash_files(weights + [os.path.join(path, "config.json")]),
        summary=hf_summary(path, cfg, weights),
        tokenizer_files=[f for f in files if not f.endswith(HF_WEIGHT_SUFFIXES)],
    )


def hf_summary(path: str, cfg: dict[str, Any], weights: list[str]) -> dict[str, Any]:
    """Returns the HF-model equivalent of ``checkpoint.summary``."""
    params = None
    if all(w.endswith(".safetensors") for w in weights):  # a damaged header: a one-line CheckpointError
        params = sum(math.prod(s) for w in weights for s in checkpoint.weight_shapes(w).values())
    return {
        "path": os.path.abspath(path),
        "fingerprint": None,  # filled by the caller (ModelIdentity.fingerprint)
        "source": "huggingface",
        "architecture": (cfg.get("architectures") or [cfg.get("model_type")])[0],
        "objective": "clm",
        "parameters": params,
        "n_layer": cfg.get("num_hidden_layers", cfg.get("n_layer")),
        "d_model": cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model"))),
        "compute": None,
    }
