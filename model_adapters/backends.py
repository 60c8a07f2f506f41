"""Causal LMs behind one interface: nfeval checkpoints and Hugging Face causal-LM directories.

A ``Backend`` gives the scorer what it needs: tokenization, special ids, the context window, and
``features_at`` (what the LM head turns into logits, only where they are scored). ``identify``
fingerprints a model path without building the model, so cached results can be served without
loading anything.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..base.errors import CheckpointError, ConfigError, MissingDataError
from ..engine import checkpoint, rundir
from ..engine.config import load_json
from ..engine.fingerprint import fingerprint_state_dict, fingerprint_tokenizer
from ..engine.generate import Sampling, generate
from ..engine.tokenization import load_tokenizer, special_ids
from .scorer import ModelShape

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


def dtype_of(name: str | torch.dtype | None) -> torch.dtype:
    """Returns the torch dtype for a name such as ``float32``/``fp32``/``bfloat16``/``bf16``."""
    if isinstance(name, torch.dtype):
        return name
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        None: torch.float32,
        "auto": torch.float32,
    }
    if name not in table:
        raise ConfigError(f"dtype {name!r}: expected float32, bfloat16 or float16")
    return table[name]


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


@dataclass
class Identity:
    """What a model path is, and the fingerprint results are cached under."""

    kind: str  # "nfeval" | "hf"
    path: str
    fingerprint: str
    tokenizer_fingerprint: str
    summary: dict[str, Any] = field(default_factory=dict)
    # the Checkpoint ``identify`` had to load whole (a fairseq file, an outside tokenizer): scored as is
    loaded: checkpoint.Checkpoint | None = None


def identify(
    path: str,
    trust_checkpoint: bool = False,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
    fairseq_head_scale_bug: bool = False,
) -> Identity:
    """Returns the kind, fingerprint and summary of the model at ``path`` without building the model
    (a fairseq checkpoint file is converted to find its fingerprint). Weights that do not match the
    fingerprint recorded in config.json, or a truncated weights file, raise CheckpointError.
    ``tokenizer``/``fairseq_dict`` override the checkpoint's tokenizer as ``checkpoint.load`` does."""
    if checkpoint.is_hf_dir(path):
        if tokenizer is not None or fairseq_dict is not None:
            raise ConfigError(
                f"{path}: a Hugging Face model uses its own tokenizer (drop --tokenizer/--fairseq-dict)"
            )
        return _identify_hf(path)
    from ..engine.model import Transformer

    if os.path.isfile(path) or tokenizer is not None:  # the tokenizer comes from outside the directory
        ckpt = checkpoint.load(
            path, trust_checkpoint=trust_checkpoint, tokenizer=tokenizer, fairseq_dict=fairseq_dict,
            fairseq_head_scale_bug=fairseq_head_scale_bug,
        )  # fmt: skip
        if ckpt.tokenizer is None:
            raise MissingDataError(no_tokenizer_message(path))
        tokenizer_fingerprint = fingerprint_tokenizer(ckpt.tokenizer)
        directory, loaded = ckpt.path, ckpt
    else:
        directory = checkpoint.resolve(path)
        cfg, meta = checkpoint.read_config(directory)
        with torch.device("meta"):
            skeleton = Transformer(cfg)
        state = checkpoint.load_state(directory, skeleton, meta.get("weights_prefix", ""))
        fingerprint = fingerprint_state_dict(state)
        checkpoint.check_fingerprint(directory, meta, fingerprint)
        tok_path = os.path.join(directory, rundir.TOKENIZER)
        tokenizer_fingerprint = (
            fingerprint_tokenizer(load_tokenizer(tok_path)) if os.path.isfile(tok_path) else "none"
        )
        ckpt = checkpoint.Checkpoint(
            model=skeleton, tokenizer=None, config=cfg, path=directory, fingerprint=fingerprint, meta=meta
        )
        loaded = None
    return Identity(
        kind="nfeval",
        path=os.path.abspath(directory),
        fingerprint=ckpt.fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
        summary=checkpoint.summary(ckpt),
        loaded=loaded,
    )


def _identify_hf(path: str) -> Identity:
    """Returns the identity of a Hugging Face model directory (hashes of its weight and tokenizer files)."""
    files = hf_files(path)
    weights = [f for f in files if f.endswith(HF_WEIGHT_SUFFIXES)]
    if not weights:
        raise MissingDataError(
            f"{path}: Hugging Face model directory without weight files (*.safetensors / *.bin)"
        )
    cfg = load_json(os.path.join(path, "config.json"))
    return Identity(
        kind="hf",
        path=os.path.abspath(path),
        fingerprint=hash_files(weights + [os.path.join(path, "config.json")]),
        tokenizer_fingerprint=hash_files([f for f in files if not f.endswith(HF_WEIGHT_SUFFIXES)]),
        summary=hf_summary(path, cfg, weights),
    )


def no_tokenizer_message(path: str) -> str:
    """Returns what to do when the checkpoint at ``path`` carries no tokenizer."""
    if os.path.isfile(path):
        return (
            f"{path}: no tokenizer for this fairseq checkpoint: pass --tokenizer DIR (GPT-2's encoder.json + "
            "vocab.bpe) with its dict.txt beside it (or --fairseq-dict), or put a tokenizer.json beside it"
        )
    tok_path = os.path.join(path, rundir.TOKENIZER)
    return f"{tok_path}: not found (scoring needs the tokenizer; or pass --tokenizer)"


def hf_summary(path: str, cfg: dict[str, Any], weights: list[str]) -> dict[str, Any]:
    """Returns the HF-model equivalent of ``checkpoint.summary``."""
    params = None
    if all(w.endswith(".safetensors") for w in weights):
        from safetensors import safe_open

        params = 0
        for w in weights:
            with safe_open(w, framework="pt") as f:
                params += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    return {
        "path": os.path.abspath(path),
        "fingerprint": None,  # filled by the caller (Identity.fingerprint)
        "source": "huggingface",
        "architecture": (cfg.get("architectures") or [cfg.get("model_type")])[0],
        "objective": "clm",
        "parameters": params,
        "n_layer": cfg.get("num_hidden_layers", cfg.get("n_layer")),
        "d_model": cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model"))),
        "compute": None,
    }


def matmul_params(model: torch.nn.Module) -> int:
    """Returns the weights of the matrices every token goes through: 2-D parameters outside embedding
    tables (a tied LM head is the token embedding, counted per scored position instead)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is not None:
        embeddings.add(id(head.weight))
    return sum(p.numel() for p in model.parameters() if p.dim() == 2 and id(p) not in embeddings)


class Backend:
    """The model, tokenizer and special ids the adapter scores with."""

    kind: str
    model: torch.nn.Module
    device: torch.device
    max_length: int
    eot_id: int
    prefix_id: int
    pad_id: int
    add_bos_default: bool | None

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def token_text(self, token_id: int) -> str | None:
        """Returns the text of one (special) token, to spot strings that already start with it."""
        raise NotImplementedError

    def features_at(self, idx: torch.Tensor, keep: torch.Tensor, position_ids: torch.Tensor | None = None,
                    attn_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Callable]:  # fmt: skip
        """Returns (features at ``keep``, row-major; the head that maps them to logits);
        ``position_ids``/``attn_mask`` for packed rows."""
        raise NotImplementedError

    def accepts_tree_mask(self) -> bool:
        """Returns True when ``features_at`` scores packed prefix trees (scorer.py)."""
        return True

    def shape(self) -> ModelShape:
        """Returns what the scorer counts model FLOPs from."""
        raise NotImplementedError

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampling: Sampling,
        stop: list[str],
        batch_size: int,
        progress: bool = False,
    ) -> list[list[int]]:
        """Returns each prompt's new tokens (EOS excluded), ``batch_size`` prompts at a time."""
        raise NotImplementedError


class NFEvalBackend(Backend):
    """An nfeval checkpoint: ``</s>`` (the tokenizer's EOS) is prepended to every scored text, as fairseq
    does."""

    kind = "nfeval"

    def __init__(self, ckpt: checkpoint.Checkpoint, device: torch.device):
        if not ckpt.config.causal:
            raise CheckpointError(
                f"{ckpt.path}: zero-shot scoring needs a causal LM (objective 'clm'), got "
                f"'{ckpt.config.objective}'"
            )
        if ckpt.tokenizer is None:
            raise MissingDataError(no_tokenizer_message(ckpt.path))
        self.ckpt, self.model, self.tokenizer, self.device = ckpt, ckpt.model, ckpt.tokenizer, device
        ids = special_ids(ckpt.tokenizer)
        self.eot_id, self.prefix_id, self.pad_id = ids.eos, ids.eos, ids.pad
        self.max_length = ckpt.config.max_seq_len
        self.add_bos_default = True
        self.tokenizer_fingerprint = fingerprint_tokenizer(ckpt.tokenizer)

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.prefix_id] + ids if add_special_tokens else ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str | None:
        return self.tokenizer.id_to_token(token_id)

    def features_at(self, idx, keep, position_ids=None, attn_mask=None):
        # without a mask, causal: right padding never reaches a real position
        hidden = self.model.encode(idx, position_ids=position_ids, attn_mask=attn_mask)
        return hidden[keep], self.model.lm_logits

    def shape(self) -> ModelShape:
        cfg = self.ckpt.config
        return ModelShape(matmul_params(self.model), cfg.d_model, cfg.n_layer, cfg.vocab_size)

    def generate(self, prompts, max_new_tokens, sampling, stop, batch_size, progress=False):
        return generate(
            self.model,
            prompts,
            max_new_tokens=max_new_tokens,
            sampling=sampling,
            eos_id=self.eot_id,
            stop=stop,
            decode=self.decode,
            batch_size=batch_size,
            pad_id=self.pad_id,
            progress=progress,
        )


def load(
    pretrained: str,
    device: torch.device,
    dtype: torch.dtype,
    fold_head_scale: bool = True,
    max_length: int | None = None,
    tokenizer: Any = None,
    trust_checkpoint: bool = False,
) -> Backend:
    """Returns the backend for an nfeval checkpoint/run dir, a fairseq file or a HF causal-LM directory."""
    if checkpoint.is_hf_dir(pretrained):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .hf_backend import HFBackend

        model = AutoModelForCausalLM.from_pretrained(pretrained, dtype=dtype).to(device)
        tok = tokenizer or AutoTokenizer.from_pretrained(pretrained)
        return HFBackend(model, tok, device, max_length)
    ckpt = checkpoint.load(
        pretrained,
        device=device,
        dtype=dtype,
        fold_head_scale=fold_head_scale,
        trust_checkpoint=trust_checkpoint,
    )
    backend = NFEvalBackend(ckpt, device)
    if max_length:
        backend.max_length = min(max_length, backend.max_length)
    return backend
