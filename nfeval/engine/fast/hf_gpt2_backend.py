"""A Hugging Face GPT-2 directory scored by nfeval's engine, tokenized exactly as lm-eval's HFLM
tokenizes it through transformers.

transformers' GPT-2 modelling costs ~2 s of imports and loading per command and its tokenizer ~1 s,
while the engine computes GPT-2 exactly (``engine.interop.hf_gpt2``: the same function to fp32 rounding). So a
GPT-2 directory whose weights, config and tokenizer the engine reproduces is built as an engine model,
with the directory's ``tokenizer.json`` run by ``tokenizers`` under the special tokens transformers
would give it. Anything else (``GPT2_TOKENIZER_KEYS`` lists what a tokenizer config may hold) is loaded
by transformers, as before; ``hf_forward="transformers"`` asks for that path always.

Generation (``nfeval generate``, lm-eval's ``generate_until``) goes the same way: the engine's decoder
stands in for the HF model's own ``generate`` only where nothing in the directory makes that pick or
stop otherwise (``generation_settings``: a repetition penalty, beams, forced tokens, a sampling
default), sampling under HF's default top-k (``HF_TOP_K``), and decoding as transformers does
(a tokenizer that cleans up decoded text and is not BPE goes to transformers). Greedy text is the HF
model's token for token; a sampled one is reproducible under its seed, not HF's random stream.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from ...base.jsonio import load_json
from ..checkpoints import checkpoint
from ..inference.backend import NFEvalBackend
from ..interop import hf_gpt2
from ..text.tokenization import load_tokenizer

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
# generation_config.json keys that leave the text of HF's generate, as HFBackend calls it, unchanged:
# token ids (HFBackend passes EOS and padding itself), what generate returns rather than what it picks,
# the length HFBackend's max_new_tokens overrides, and transformers' bookkeeping
GENERATION_KEYS = {
    "_from_model_config", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
    "decoder_start_token_id", "use_cache", "output_attentions", "output_hidden_states", "output_scores",
    "output_logits", "return_dict_in_generate", "max_length",
}  # fmt: skip
# the other GenerationConfig fields (transformers 5): any of them in generation_config.json, or in a
# config.json (transformers lifts them from there), changes what generate picks or how it stops, so the
# directory goes to transformers; a key it does not know goes there too
GENERATION_PARAMS = {
    "assistant_confidence_threshold", "assistant_early_exit", "assistant_ensemble_weight",
    "assistant_lookbehind", "bad_words_ids", "begin_suppress_tokens", "cache_config",
    "cache_implementation", "compile_config", "constraints", "continuous_batching_config",
    "disable_compile", "diversity_penalty", "do_sample", "dola_layers", "early_stopping",
    "encoder_no_repeat_ngram_size", "encoder_repetition_penalty", "epsilon_cutoff", "eta_cutoff",
    "exponential_decay_length_penalty", "force_words_ids", "forced_bos_token_id", "forced_eos_token_id",
    "guidance_scale", "is_assistant", "length_penalty", "low_memory", "max_cache_len",
    "max_matching_ngram_size", "max_new_tokens", "max_time", "min_length", "min_new_tokens", "min_p",
    "no_repeat_ngram_size", "num_assistant_tokens", "num_assistant_tokens_schedule", "num_beam_groups",
    "num_beams", "num_return_sequences", "penalty_alpha", "prefill_chunk_size",
    "prompt_lookup_num_tokens", "remove_invalid_values", "renormalize_logits", "repetition_penalty",
    "sequence_bias", "speculation_type", "stop_strings", "suppress_tokens", "target_lookbehind",
    "temperature", "token_healing", "top_h", "top_k", "top_p", "typical_p", "use_mtp",
    "watermarking_config",
}  # fmt: skip
# GenerationConfig's top_k, which HF's sampling applies when HFBackend is given none (--top-k 0)
HF_TOP_K = 50


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

    def generate(self, prompts, max_new_tokens, sampling, stop, batch_size, progress=False):
        """The engine's decoder under HF's sampling defaults: sampling without a top-k keeps the
        ``HF_TOP_K`` most likely tokens, as the HF model's own ``generate`` does (greedy: unchanged)."""
        if not sampling.greedy and not sampling.top_k:
            sampling = dataclasses.replace(sampling, top_k=HF_TOP_K)
        return super().generate(prompts, max_new_tokens, sampling, stop, batch_size, progress)


def hf_gpt2_backend(
    path: str, device: torch.device, dtype: torch.dtype, max_length: int | None
) -> GPT2EngineBackend | None:
    """Returns the engine backend of the HF directory ``path`` in ``dtype`` on ``device``, or None when
    the engine does not reproduce it (not GPT-2, a field or tensor ``hf_gpt2`` does not map, a tokenizer
    transformers would run otherwise than tokenizer.json says)."""
    special = tokenizer_special_tokens(path)
    if special is None or generation_settings(path):
        return None
    ckpt, _ = hf_gpt2.read_dir(path)
    if ckpt is None:
        return None
    tok = load_tokenizer(os.path.join(path, "tokenizer.json"))  # a damaged one: a one-line DataError
    cleans_up = load_json(os.path.join(path, "tokenizer_config.json")).get("clean_up_tokenization_spaces")
    if cleans_up and type(tok.model).__name__ != "BPE":  # transformers 5 cleans up decoded text but BPE's
        return None
    ids = {k: None if v is None else tok.token_to_id(v) for k, v in special.items()}
    if ids["eos_token"] is None or any(ids[k] is None for k, v in special.items() if v is not None):
        return None
    ckpt.tokenizer = tok
    ckpt = checkpoint.materialize(ckpt, device, dtype)
    backend = GPT2EngineBackend(ckpt, device, ids)
    if max_length:
        backend.max_length = min(max_length, backend.max_length)
    return backend


def generation_settings(path: str) -> list[str]:
    """Returns the settings of ``path`` that make the HF model's own ``generate`` pick or stop otherwise
    than the engine's decoder (a repetition penalty, beams, forced tokens, a sampling default, ...):
    generation_config.json's keys but ``GENERATION_KEYS``, config.json's ``GENERATION_PARAMS``."""
    settings = []
    generation_path = os.path.join(path, "generation_config.json")
    if os.path.isfile(generation_path):
        settings += sorted(set(load_json(generation_path)) - GENERATION_KEYS)
    return settings + sorted(GENERATION_PARAMS & set(load_json(os.path.join(path, "config.json"))))


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
