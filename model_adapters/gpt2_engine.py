"""A Hugging Face GPT-2 directory scored by nfeval's engine, tokenized exactly as lm-eval's HFLM
tokenizes it through transformers.

transformers' GPT-2 modelling costs ~2 s of imports and loading per command and its tokenizer ~1 s,
while the engine computes GPT-2 exactly (``engine.interop.hf_gpt2``: the same function to fp32 rounding). So a
GPT-2 directory whose weights, config and tokenizer the engine reproduces is built as an engine model,
with the directory's ``tokenizer.json`` run by ``tokenizers`` under the special tokens transformers
would give it. Anything else (``GPT2_TOKENIZER_KEYS`` lists what a tokenizer config may hold) is loaded
by transformers, as before; ``hf_forward="transformers"`` asks for that path always.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..base.jsonio import load_json
from ..engine.checkpoints import checkpoint
from ..engine.inference.backend import NFEvalBackend
from ..engine.interop import hf_gpt2
from ..engine.kernels import cpu_linear
from ..engine.text.tokenization import load_tokenizer

# tokenizer classes whose transformers tokenizer runs tokenizer.json as it is, and the special tokens
# each class gives a config that names none (GPT2Tokenizer's defaults)
TOKENIZER_DEFAULTS = {
    "GPT2Tokenizer": "<|endoftext|>",
    "GPT2TokenizerFast": "<|endoftext|>",
    "PreTrainedTokenizerFast": None,
    "TokenizersBackend": None,
}
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")
# tokenizer_config.json keys that leave encoding to tokenizer.json (a truthy add_*/add_prefix_space
# makes transformers change the pipeline; any key not listed sends the directory to transformers)
GPT2_TOKENIZER_KEYS = {
    *SPECIAL, "mask_token", "tokenizer_class", "backend", "model_max_length", "errors",
    "clean_up_tokenization_spaces", "added_tokens_decoder", "extra_special_tokens", "name_or_path",
    "special_tokens_map_file", "add_bos_token", "add_eos_token", "add_prefix_space",
}  # fmt: skip
OFF_ONLY = ("add_bos_token", "add_eos_token", "add_prefix_space")


class GPT2EngineBackend(NFEvalBackend):
    """A GPT-2 directory's weights in the engine, tokenized as transformers tokenizes for HFLM: the
    tokenizer's own special tokens (``add_special_tokens`` left to tokenizer.json's post-processor), BOS
    as the prefix token when there is one, else EOS."""

    kind = "hf"
    forward_by = "nfeval engine (GPT-2 weights)"

    def __init__(self, ckpt: checkpoint.Checkpoint, device: torch.device, special: dict[str, int | None]):
        self.ckpt, self.model, self.tokenizer, self.device = ckpt, ckpt.model, ckpt.tokenizer, device
        self.max_length = ckpt.config.max_seq_len  # resolve_max_length: GPT2Config.n_positions
        self.eot_id = special["eos_token"]
        self.prefix_id = special["bos_token"] if special["bos_token"] is not None else self.eot_id
        # lm-eval's configure_pad_token: the pad token, else UNK, else EOS (padding is masked: ids only)
        pads = (special[k] for k in ("pad_token", "unk_token", "eos_token") if special[k] is not None)
        self.pad_id = next(pads)
        self.add_bos_default = None

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens is not False).ids

    def token_text(self, token_id: int) -> str | None:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)


def gpt2_engine_backend(
    path: str, device: torch.device, dtype: torch.dtype, max_length: int | None
) -> GPT2EngineBackend | None:
    """Returns the engine backend of the HF directory ``path`` in ``dtype`` on ``device``, or None when
    the engine does not reproduce it (not GPT-2, a field or tensor ``hf_gpt2`` does not map, a tokenizer
    transformers would run otherwise than tokenizer.json says)."""
    special = tokenizer_special_tokens(path)
    if special is None:
        return None
    ckpt, _ = hf_gpt2.read_dir(path)
    if ckpt is None:
        return None
    tok = load_tokenizer(os.path.join(path, "tokenizer.json"))  # a damaged one: a one-line DataError
    ids = {k: None if v is None else tok.token_to_id(v) for k, v in special.items()}
    if ids["eos_token"] is None or any(ids[k] is None for k, v in special.items() if v is not None):
        return None
    ckpt.tokenizer = tok
    ckpt = checkpoint.materialize(ckpt, device, dtype)
    cpu_linear.convert(ckpt.model)
    backend = GPT2EngineBackend(ckpt, device, ids)
    if max_length:
        backend.max_length = min(max_length, backend.max_length)
    return backend


def tokenizer_special_tokens(path: str) -> dict[str, str | None] | None:
    """Returns {bos/eos/unk/pad_token: its text or None} as transformers resolves them for ``path``'s
    tokenizer, or None when transformers would not run its tokenizer.json unchanged (or no
    tokenizer.json, or special_tokens_map.json disagreeing with tokenizer_config.json)."""
    config_path = os.path.join(path, "tokenizer_config.json")
    if not os.path.isfile(os.path.join(path, "tokenizer.json")) or not os.path.isfile(config_path):
        return None
    config = load_json(config_path)
    cls = config.get("tokenizer_class")
    unknown = set(config) - GPT2_TOKENIZER_KEYS
    if cls not in TOKENIZER_DEFAULTS or unknown or any(config.get(k) for k in OFF_ONLY):
        return None
    map_path = os.path.join(path, "special_tokens_map.json")
    mapped = load_json(map_path) if os.path.isfile(map_path) else {}
    out = {}
    for key in SPECIAL:
        value = _content(config[key]) if key in config else TOKENIZER_DEFAULTS[cls]
        if key in mapped and _content(mapped[key]) != value:
            return None
        out[key] = value
    return out


def _content(value: Any) -> str | None:
    """Returns a special token's text from its tokenizer-config form (a string or an AddedToken dict)."""
    return value.get("content") if isinstance(value, dict) else value
