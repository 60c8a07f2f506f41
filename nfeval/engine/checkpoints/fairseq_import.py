"""Import a fairseq ``transformer_lm`` checkpoint (NormFormer or baseline) as an nfeval Transformer.

fairseq's names map onto ours one to one (q/k/v projections are concatenated into ``qkv``):

    decoder.embed_tokens              tok_emb            decoder.layers.N.attn_ln          attn_out_norm
    decoder.embed_positions (learned) pos_emb (rows      decoder.layers.N.c_attn           attn.head_gain
                                      from pad+1 on)     decoder.layers.N.ffn_layernorm    ffn_hidden_norm
    decoder.layers.N.self_attn_layer_norm  attn_norm     decoder.layers.N.final_layer_norm ffn_norm
    decoder.layers.N.self_attn.out_proj    attn.out_proj decoder.layers.N.w_resid          resid_gain
    decoder.layer_norm                final_norm         decoder.output_projection         (tied)
    decoder.layernorm_embedding       emb_norm

The tensors give the sizes and which optional parts the model has; the saved config gives what they
cannot (norm placement, embedding scale, activation, dropout) and must agree with them
(``fairseq_config``). Checkpoints trained before fairseq's 2021-11-03 fix scaled heads with
``einsum('tbhd,h->tbdh')``; pass ``head_scale_transpose_bug=True`` to reproduce their forward exactly.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch

from ...base.errors import CheckpointError, ConfigError
from ..model.config import ModelConfig
from ..model.model import Transformer
from . import fairseq_config, torch_files

# fairseq's max_target_positions when the config says neither it nor tokens_per_sample
DEFAULT_MAX_TARGET_POSITIONS = 1024

LAYER_NAMES = {
    "self_attn_layer_norm": "attn_norm",
    "self_attn.out_proj": "attn.out_proj",
    "attn_ln": "attn_out_norm",
    "c_attn": "attn.head_gain",
    "fc1": "fc1",
    "fc2": "fc2",
    "ffn_layernorm": "ffn_hidden_norm",
    "final_layer_norm": "ffn_norm",
    "w_resid": "resid_gain",
}


# Decoder tensors outside the layers that the importer maps (or, for the last two, safely drops).
TOP_LEVEL = {
    "decoder.embed_tokens.weight", "decoder.embed_positions.weight", "decoder.layer_norm.weight",
    "decoder.layer_norm.bias", "decoder.layernorm_embedding.weight", "decoder.layernorm_embedding.bias",
    "decoder.output_projection.weight", "decoder.embed_positions._float_tensor", "decoder.version",
}  # fmt: skip
QKV = re.compile(r"decoder\.layers\.\d+\.self_attn\.[qkv]_proj\.(weight|bias)$")


class FairseqConfigWarning(UserWarning):
    """A fairseq checkpoint's config disagrees with its weights (the weights decide)."""


def convert_state_dict(
    state: dict[str, torch.Tensor],
    hparams: dict[str, Any],
    source: str,
    head_scale_transpose_bug: bool = False,
    config_key: str | None = None,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Returns (config, nfeval state dict) for a fairseq decoder state dict and its saved config
    ``hparams`` (read from ``config_key``: ``fairseq_config.config_key``); errors name ``source`` and the
    key."""
    layers = _check_layout(state, source)
    cfg = _model_config(state, hparams, source, len(layers), head_scale_transpose_bug, config_key)
    pad = cfg.pad_token_id
    out: dict[str, torch.Tensor] = {"tok_emb.weight": state["decoder.embed_tokens.weight"]}
    if cfg.positions == "learned":
        out["pos_emb.weight"] = state["decoder.embed_positions.weight"][pad + 1 :]
    for ours, theirs in (("final_norm", "decoder.layer_norm"), ("emb_norm", "decoder.layernorm_embedding")):
        if theirs + ".weight" in state:  # what cfg.final_norm and cfg.embedding_norm were read from
            for kind in ("weight", "bias"):
                out[f"{ours}.{kind}"] = _tensor(state, f"{theirs}.{kind}", source)
    for i in layers:
        out.update(_layer_tensors(state, i, source))
    return cfg, out


def _tensor(state: dict[str, torch.Tensor], name: str, source: str, ndim: int | None = None) -> torch.Tensor:
    """Returns ``state[name]``; raises CheckpointError naming ``source`` and the tensor when it is missing
    or (given ``ndim``) has another number of dimensions."""
    if name not in state:
        raise CheckpointError(f"{source}: tensor {name!r} is missing")
    if ndim is not None and state[name].dim() != ndim:
        raise CheckpointError(
            f"{source}: tensor {name!r} has shape {tuple(state[name].shape)}; expected {ndim} dimensions"
        )
    return state[name]


def _layer_indices(state: dict[str, torch.Tensor]) -> list[int]:
    """Returns the sorted indices N of the ``decoder.layers.N.*`` tensors in ``state``."""
    return sorted({int(m.group(1)) for k in state if (m := re.match(r"decoder\.layers\.(\d+)\.", k))})


def _check_state(state: Any, source: str) -> dict[str, torch.Tensor]:
    """Returns ``state`` (a checkpoint's ``model`` entry) when it maps tensor names to tensors of finite
    values; a CheckpointError naming ``source`` and the first entry that does not, otherwise."""
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{source}: key 'model' is a {type(state).__name__}; expected fairseq's tensors by name"
        )
    for name, value in state.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{source}: model[{name!r}] is a {type(value).__name__}; expected a tensor under its name"
            )
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(
                f"{source}: tensor {name!r} holds non-finite weights (NaN or inf); expected finite "
                "values (a run that diverged?)"
            )
    return state


def _check_layout(state: dict[str, torch.Tensor], source: str) -> list[int]:
    """Returns the decoder's layer indices; raises CheckpointError when ``state`` is not a
    transformer_lm_gpt decoder (no embeddings, no layers, an unknown top-level tensor)."""
    if "decoder.embed_tokens.weight" not in state:
        raise CheckpointError(
            f"{source}: no 'decoder.embed_tokens.weight': not a fairseq transformer_lm checkpoint"
        )
    layers = _layer_indices(state)
    if not layers:
        raise CheckpointError(f"{source}: no 'decoder.layers.N.*' tensors")
    unsupported = sorted(k for k in state if k not in TOP_LEVEL and not k.startswith("decoder.layers."))
    if unsupported:
        raise CheckpointError(
            f"{source}: unsupported tensor {unsupported[0]!r} (not a transformer_lm_gpt part)"
        )
    return layers


def _model_config(
    state: dict[str, torch.Tensor],
    hparams: dict[str, Any],
    source: str,
    n_layer: int,
    transpose_bug: bool,
    config_key: str | None = None,
) -> ModelConfig:
    """Returns the ModelConfig the tensors' names and shapes and the saved config (at ``config_key``)
    describe; raises CheckpointError when the config lacks a setting, turns on an option nfeval lacks or
    contradicts the tensors, when the head count is unknown or does not divide the width, when the
    output projection is untied, or when the model they describe is not one nfeval builds."""
    settings = fairseq_config.decoder_settings(hparams, source)
    first = "decoder.layers.0."
    emb = _tensor(state, "decoder.embed_tokens.weight", source, ndim=2)
    n_head, head_gains = _head_count(state, hparams, source, emb, config_key)
    pad = fairseq_config.integer(hparams, "pad", 1, source)
    learned = "decoder.embed_positions.weight" in state
    max_len = (
        (_tensor(state, "decoder.embed_positions.weight", source, ndim=2).shape[0] - pad - 1)
        if learned
        else fairseq_config.integer(hparams, "max_target_positions", None, source)
        or fairseq_config.integer(hparams, "tokens_per_sample", None, source)
        or DEFAULT_MAX_TARGET_POSITIONS
    )
    out_proj = state.get("decoder.output_projection.weight")
    if out_proj is not None and not torch.equal(out_proj, emb):
        raise CheckpointError(
            f"{source}: 'decoder.output_projection.weight' is not tied to the embeddings (unsupported)"
        )
    try:
        cfg = ModelConfig(
            vocab_size=emb.shape[0],
            n_layer=n_layer,
            d_model=emb.shape[1],
            n_head=n_head,
            d_ffn=_tensor(state, first + "fc1.weight", source, ndim=2).shape[0],
            max_seq_len=max_len,
            final_norm="decoder.layer_norm.weight" in state,
            embedding_norm="decoder.layernorm_embedding.weight" in state,
            scale_attn=first + "attn_ln.weight" in state,
            scale_fc=first + "ffn_layernorm.weight" in state,
            scale_heads=head_gains,
            scale_resids=first + "w_resid" in state,
            head_scale_transpose_bug=transpose_bug,
            positions="learned" if learned else "sinusoidal",
            pad_token_id=pad,
            init="fairseq",  # what trained it: fairseq's transformer_lm
            **settings,
        )
    except ConfigError as e:  # sizes that no model has (no position left after the padding rows)
        raise CheckpointError(f"{source}: the model it describes is not one nfeval builds ({e})") from None
    fairseq_config.check_tensors(hparams, state, cfg, source)
    return cfg


def _head_count(
    state: dict[str, torch.Tensor],
    hparams: dict[str, Any],
    source: str,
    emb: torch.Tensor,
    config_key: str | None,
) -> tuple[int, bool]:
    """Returns (the number of attention heads, whether the layers have HeadScale gains): the length of
    layer 0's ``c_attn`` where there is one, else the saved config's ``decoder_attention_heads``; a
    CheckpointError naming ``source`` and where the count was read when there is none, or when it is not
    a positive number that divides the embedding width (fairseq's attention splits the width into
    heads)."""
    gains = "decoder.layers.0.c_attn"
    n_head = _tensor(state, gains, source, ndim=1).shape[0] if gains in state else None
    n_head = hparams.get("decoder_attention_heads") if n_head is None else n_head
    if n_head is None:
        raise CheckpointError(
            f"{source}: cannot tell the number of heads (no c_attn and no decoder_attention_heads)"
        )
    n_head = fairseq_config.integer({"decoder_attention_heads": n_head}, "decoder_attention_heads", 0, source)
    width = emb.shape[1]
    if n_head < 1 or width % n_head:
        key = f"{config_key}." if config_key else ""
        read = (
            f"tensor {gains!r} has {n_head} heads"
            if gains in state
            else f"{key}decoder_attention_heads={n_head}"
        )
        raise CheckpointError(
            f"{source}: {read}; expected a positive number of heads that divides the embedding width "
            f"{width} ('decoder.embed_tokens.weight' has shape {tuple(emb.shape)})"
        )
    return n_head, gains in state


def _layer_tensors(state: dict[str, torch.Tensor], i: int, source: str) -> dict[str, torch.Tensor]:
    """Returns layer ``i``'s tensors under nfeval's names (q, k and v concatenated into one qkv)."""
    src, dst = f"decoder.layers.{i}.", f"blocks.{i}."
    out = {}
    for kind in ("weight", "bias"):
        parts = [f"{src}self_attn.{p}_proj.{kind}" for p in "qkv"]
        missing = [p for p in parts if p not in state]
        if missing:
            raise CheckpointError(f"{source}: tensor {missing[0]!r} is missing")
        shapes = [tuple(state[p].shape) for p in parts]
        if len(set(shapes)) != 1:
            raise CheckpointError(
                f"{source}: tensors {parts[0]!r}, {parts[1]!r}, {parts[2]!r} have shapes {shapes}; "
                "expected one shape"
            )
        out[f"{dst}attn.qkv.{kind}"] = torch.cat([state[p] for p in parts])
    for name, tensor in state.items():
        if not name.startswith(src) or QKV.match(name):
            continue
        rest = name[len(src) :]
        base, _, kind = rest.rpartition(".") if rest not in LAYER_NAMES else (rest, "", "")
        if base not in LAYER_NAMES:
            raise CheckpointError(f"{source}: unsupported tensor {name!r}")
        out[dst + LAYER_NAMES[base] + (f".{kind}" if kind else "")] = tensor
    return out


def load_fairseq(
    path: str, head_scale_transpose_bug: bool = False, trust: bool = False
) -> tuple[Transformer, list[str]]:
    """Returns (the nfeval Transformer in eval mode, notes on config/weights disagreements) for a fairseq
    LM checkpoint file; each note is also issued as a ``FairseqConfigWarning``.

    fairseq checkpoints are pickles. Their tensors and plain configs (argparse Namespace, dicts) load
    without running code; anything else needs ``trust=True`` (``--trust-checkpoint``), see torch_files.
    """
    ckpt = torch_files.load(path, trust=trust)
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise CheckpointError(f"{path}: expected a fairseq checkpoint dict with key 'model'")
    hparams = fairseq_config.saved_config(ckpt, path)
    model_state = _check_state(ckpt["model"], path)
    key = fairseq_config.config_key(ckpt, path)
    cfg, state = convert_state_dict(model_state, hparams, path, head_scale_transpose_bug, key)
    notes = fairseq_config.normformer_disagreements(hparams, cfg, path)
    for note in notes:
        warnings.warn(note, FairseqConfigWarning, stacklevel=2)
    model = Transformer(cfg)
    expected = model.state_dict()
    for name, t in state.items():
        if name not in expected:
            raise CheckpointError(f"{path}: converted tensor {name!r} has no place in the model")
        if t.shape != expected[name].shape:
            raise CheckpointError(
                f"{path}: tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(expected[name].shape)}"
            )
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(f"{path}: no fairseq tensor for {missing[0]!r}")
    model.load_state_dict(state)
    return model.eval(), notes
