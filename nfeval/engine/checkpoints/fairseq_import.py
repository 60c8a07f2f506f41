"""Import a fairseq ``transformer_lm`` checkpoint (NormFormer or baseline) as an nfeval Transformer.

fairseq's names map onto ours one to one (q/k/v projections are concatenated into ``qkv``):

    decoder.embed_tokens              tok_emb            decoder.layers.N.attn_ln          attn_out_norm
    decoder.embed_positions (learned) pos_emb (rows      decoder.layers.N.c_attn           attn.head_gain
                                      from pad+1 on)     decoder.layers.N.ffn_layernorm    ffn_hidden_norm
    decoder.layers.N.self_attn_layer_norm  attn_norm     decoder.layers.N.final_layer_norm ffn_norm
    decoder.layers.N.self_attn.out_proj    attn.out_proj decoder.layers.N.w_resid          resid_gain
    decoder.layer_norm                final_norm         decoder.output_projection         (tied)

Checkpoints trained before fairseq's 2021-11-03 fix scaled heads with ``einsum('tbhd,h->tbdh')``;
pass ``head_scale_transpose_bug=True`` to reproduce their forward exactly.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch

from ...base.errors import CheckpointError
from ..model.config import ModelConfig
from ..model.model import Transformer
from . import torch_files

# fairseq's activation_fn -> nfeval's activation (gelu_fast is fairseq's old name of gelu_accurate)
FAIRSEQ_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_accurate": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu_squared": "relu_squared",
}

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
    "decoder.layer_norm.bias", "decoder.output_projection.weight",
    "decoder.embed_positions._float_tensor", "decoder.version",
}  # fmt: skip
QKV = re.compile(r"decoder\.layers\.\d+\.self_attn\.[qkv]_proj\.(weight|bias)$")
# Each NormFormer flag of fairseq's config and the per-layer tensor it creates.
NORMFORMER_TENSORS = {"scale_attn": "attn_ln", "scale_fc": "ffn_layernorm", "scale_heads": "c_attn",
                      "scale_resids": "w_resid"}  # fmt: skip


class FairseqConfigWarning(UserWarning):
    """A fairseq checkpoint's config disagrees with its weights (the weights decide)."""


def config_disagreements(hparams: dict[str, Any], cfg: ModelConfig, source: str) -> list[str]:
    """Returns a note when the config sets NormFormer flags whose tensors the weights lack (fairseq's
    hydra training path dropped these flags and trained a model without them); else an empty list."""
    claimed = [flag for flag in NORMFORMER_TENSORS if hparams.get(flag) is True and not getattr(cfg, flag)]
    if not claimed:
        return []
    tensors = ", ".join(NORMFORMER_TENSORS[flag] for flag in claimed)
    return [
        f"{source}: the checkpoint's config sets {', '.join(f'{f}=True' for f in claimed)} but its weights "
        f"have no {tensors} tensors (fairseq's hydra path drops these flags); the weights decide: "
        f"loading a {cfg.architecture} model"
    ]


def _cfg_dict(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Returns the model hyper-parameters of a fairseq checkpoint as a plain dict (new cfg or old args)."""
    if ckpt.get("cfg") is not None and ckpt["cfg"].get("model") is not None:
        model_cfg = ckpt["cfg"]["model"]
        return dict(model_cfg.items()) if hasattr(model_cfg, "items") else vars(model_cfg)
    if ckpt.get("args") is not None:
        return vars(ckpt["args"])
    return {}


def convert_state_dict(
    state: dict[str, torch.Tensor],
    hparams: dict[str, Any],
    source: str,
    head_scale_transpose_bug: bool = False,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Returns (config, nfeval state dict) for a fairseq decoder state dict; errors name ``source`` and
    the key."""
    layers = _check_layout(state, source)
    cfg = _model_config(state, hparams, source, len(layers), head_scale_transpose_bug)
    pad = cfg.pad_token_id
    out: dict[str, torch.Tensor] = {"tok_emb.weight": state["decoder.embed_tokens.weight"]}
    if cfg.positions == "learned":
        out["pos_emb.weight"] = state["decoder.embed_positions.weight"][pad + 1 :]
    if cfg.final_norm:
        out["final_norm.weight"] = state["decoder.layer_norm.weight"]
        out["final_norm.bias"] = state["decoder.layer_norm.bias"]
    for i in layers:
        out.update(_layer_tensors(state, i, source))
    return cfg, out


def _check_layout(state: dict[str, torch.Tensor], source: str) -> list[int]:
    """Returns the decoder's layer indices; raises CheckpointError when ``state`` is not a
    transformer_lm_gpt decoder (no embeddings, no layers, an unknown top-level tensor)."""
    if "decoder.embed_tokens.weight" not in state:
        raise CheckpointError(
            f"{source}: no 'decoder.embed_tokens.weight': not a fairseq transformer_lm checkpoint"
        )
    layers = sorted({int(m.group(1)) for k in state if (m := re.match(r"decoder\.layers\.(\d+)\.", k))})
    if not layers:
        raise CheckpointError(f"{source}: no 'decoder.layers.N.*' tensors")
    unsupported = sorted(k for k in state if k not in TOP_LEVEL and not k.startswith("decoder.layers."))
    if unsupported:
        raise CheckpointError(
            f"{source}: unsupported tensor {unsupported[0]!r} (not a transformer_lm_gpt part)"
        )
    return layers


def _model_config(
    state: dict[str, torch.Tensor], hparams: dict[str, Any], source: str, n_layer: int, transpose_bug: bool
) -> ModelConfig:
    """Returns the ModelConfig the tensors' names and shapes (and fairseq's hyperparameters) describe;
    raises CheckpointError when the head count is unknown or the output projection is untied."""
    first = "decoder.layers.0."
    emb = state["decoder.embed_tokens.weight"]
    heads = state.get(first + "c_attn")
    n_head = heads.shape[0] if heads is not None else hparams.get("decoder_attention_heads")
    if n_head is None:
        raise CheckpointError(
            f"{source}: cannot tell the number of heads (no c_attn and no decoder_attention_heads)"
        )
    pad = int(hparams.get("pad", 1))
    learned = "decoder.embed_positions.weight" in state
    max_len = (
        (state["decoder.embed_positions.weight"].shape[0] - pad - 1)
        if learned
        else int(hparams.get("max_target_positions") or hparams.get("tokens_per_sample") or 2048)
    )
    activation = FAIRSEQ_ACTIVATIONS.get(hparams.get("activation_fn", "gelu"))
    if activation is None:
        raise CheckpointError(
            f"{source}: activation_fn={hparams['activation_fn']!r}: nfeval computes "
            f"{', '.join(FAIRSEQ_ACTIVATIONS)} (unsupported)"
        )
    out_proj = state.get("decoder.output_projection.weight")
    if out_proj is not None and not torch.equal(out_proj, emb):
        raise CheckpointError(
            f"{source}: 'decoder.output_projection.weight' is not tied to the embeddings (unsupported)"
        )
    return ModelConfig(
        vocab_size=emb.shape[0],
        n_layer=n_layer,
        d_model=emb.shape[1],
        n_head=int(n_head),
        d_ffn=state[first + "fc1.weight"].shape[0],
        max_seq_len=max_len,
        norm_position="pre"
        if hparams.get("decoder_normalize_before", "decoder.layer_norm.weight" in state)
        else "post",
        final_norm="decoder.layer_norm.weight" in state,
        scale_attn=first + "attn_ln.weight" in state,
        scale_fc=first + "ffn_layernorm.weight" in state,
        scale_heads=heads is not None,
        scale_resids=first + "w_resid" in state,
        head_scale_transpose_bug=transpose_bug,
        positions="learned" if learned else "sinusoidal",
        scale_embedding=not hparams.get("no_scale_embedding", False),
        activation=activation,
        pad_token_id=pad,
        init="fairseq",  # what trained it: fairseq's transformer_lm
    )


def _layer_tensors(state: dict[str, torch.Tensor], i: int, source: str) -> dict[str, torch.Tensor]:
    """Returns layer ``i``'s tensors under nfeval's names (q, k and v concatenated into one qkv)."""
    src, dst = f"decoder.layers.{i}.", f"blocks.{i}."
    out = {}
    for kind in ("weight", "bias"):
        parts = [f"{src}self_attn.{p}_proj.{kind}" for p in "qkv"]
        missing = [p for p in parts if p not in state]
        if missing:
            raise CheckpointError(f"{source}: tensor {missing[0]!r} is missing")
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
    hparams = _cfg_dict(ckpt)
    cfg, state = convert_state_dict(ckpt["model"], hparams, path, head_scale_transpose_bug)
    notes = config_disagreements(hparams, cfg, path)
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
