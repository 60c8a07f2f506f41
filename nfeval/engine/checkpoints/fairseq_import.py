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
cannot (norm placement, embedding scale, activation, dropout) and must agree with them. Checkpoints
trained before fairseq's 2021-11-03 fix scaled heads with ``einsum('tbhd,h->tbdh')``; pass
``head_scale_transpose_bug=True`` to reproduce their forward exactly.

The saved config. A fairseq checkpoint keeps its model's hyper-parameters beside the tensors
(``cfg["model"]`` since fairseq 0.10, ``args`` before). Some of them change what the decoder computes and
leave no trace in the tensors: Pre- or Post-LN, the √d embedding scale, the activation, dropout. fairseq
fills a missing one with its own default, which need not be what trained the weights, so the importer
requires each of them (``REQUIRED``) and refuses a file without it. The settings the tensors do show
(learned positions, the final LayerNorm, the embedding LayerNorm, the output projection, the sizes) are
checked against the tensors wherever the config states them; options that change the decoder and that
nfeval's model lacks (``UNSUPPORTED``) are refused when on, never dropped.

fairseq's ``transformer_lm`` build sets ``decoder_normalize_before=True`` whatever was asked
(``base_lm_architecture``), so its own files say True; a file that says False (a fairseq copy of an
nfeval Post-LN run) is read as written: a Post-LN decoder, as fairseq's ``TransformerDecoder`` builds it.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import torch

from ...base.errors import CheckpointError, ConfigError
from ..model.config import ModelConfig
from ..model.model import Transformer
from . import torch_files

# Settings that change the computation and that no tensor shows; fairseq's defaults for them (relu,
# dropout 0.1, Post-LN in the dataclass) differ from the recipe nfeval's own runs and the paper use.
REQUIRED = ("decoder_normalize_before", "no_scale_embedding", "activation_fn", "dropout", "attention_dropout")

# fairseq's activation_fn -> nfeval's activation (gelu_fast is fairseq's old name of gelu_accurate)
FAIRSEQ_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_accurate": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu_squared": "relu_squared",
}

# Options of fairseq's decoder that nfeval's model lacks, each off at fairseq's default (a false value:
# False, None, 0), so a config that omits one means it off.
UNSUPPORTED = {
    "adaptive_input": "adaptive input embeddings",
    "adaptive_softmax_cutoff": "adaptive softmax",
    "character_embeddings": "character embeddings",
    "char_inputs": "character inputs",
    "no_token_positional_embeddings": "a decoder without position embeddings",
    "cross_self_attention": "cross+self-attention",
    "activation_dropout": "dropout after the FFN activation",
    "relu_dropout": "dropout after the FFN activation",
    "decoder_layerdrop": "LayerDrop",
    "decoder_layers_to_keep": "pruned layers",
    "quant_noise_pq": "quantization noise",
    "quant_noise_scalar": "quantization noise",
    "base_layers": "BASE layers",
    "decoder_xformers_att_config": "xFormers attention",
}

CFG_MODEL = "cfg['model']"  # where fairseq 0.10 on saves the model's settings (``args`` before)

# Each NormFormer flag of fairseq's config and the per-layer tensor it creates.
NORMFORMER_TENSORS = {"scale_attn": "attn_ln", "scale_fc": "ffn_layernorm", "scale_heads": "c_attn",
                      "scale_resids": "w_resid"}  # fmt: skip


def saved_config(ckpt: dict[str, Any], source: str = "the checkpoint") -> dict[str, Any]:
    """Returns the model hyper-parameters of a fairseq checkpoint as a plain dict (new cfg or old args;
    empty when it saved neither); a CheckpointError naming ``source`` when one is there but holds no
    settings (not a mapping or a Namespace)."""
    key = config_key(ckpt, source)
    if key is None:
        return {}
    return _settings(ckpt["cfg"]["model"] if key == CFG_MODEL else ckpt["args"], key, source)


def config_key(ckpt: dict[str, Any], source: str = "the checkpoint") -> str | None:
    """Returns where a fairseq checkpoint saved its model hyper-parameters: ``cfg['model']`` (fairseq
    0.10 on), ``args`` (before), or None (neither); a CheckpointError naming ``source`` when ``cfg`` is
    there but holds no settings."""
    cfg = ckpt.get("cfg")
    if cfg is not None and not hasattr(cfg, "get"):
        raise CheckpointError(f"{source}: key 'cfg' is a {type(cfg).__name__}; expected fairseq's config")
    if cfg is not None and cfg.get("model") is not None:
        return CFG_MODEL
    return "args" if ckpt.get("args") is not None else None


def _settings(value: Any, key: str, source: str) -> dict[str, Any]:
    """Returns the settings a saved fairseq config holds (a mapping or an argparse Namespace) as a dict
    with string keys; a CheckpointError naming ``source`` and ``key`` for anything else."""
    if hasattr(value, "items"):
        out = dict(value.items())
    elif hasattr(value, "__dict__"):
        out = vars(value)
    else:
        raise CheckpointError(
            f"{source}: {key} is a {type(value).__name__}; expected fairseq's model settings"
        )
    if not all(isinstance(k, str) for k in out):
        raise CheckpointError(f"{source}: {key} has a setting not named by a string")
    return out


def decoder_settings(hparams: dict[str, Any], source: str) -> dict[str, Any]:
    """Returns the ModelConfig fields that only the saved config can tell (norm placement, embedding
    scale, activation, dropout, attention dropout); raises CheckpointError naming ``source`` and the
    field when one of ``REQUIRED`` is missing or malformed, or an ``UNSUPPORTED`` option is on."""
    if not hparams:
        raise CheckpointError(
            f"{source}: no saved fairseq model config (cfg['model'] or args): expected one that says "
            f"{', '.join(REQUIRED)}"
        )
    missing = [name for name in REQUIRED if hparams.get(name) is None]
    if missing:
        raise CheckpointError(
            f"{source}: the saved fairseq config has no {missing[0]!r}: it changes the computation and no "
            "tensor shows it, so nfeval will not guess it (expected it in cfg['model'] or args)"
        )
    on = [name for name in UNSUPPORTED if hparams.get(name)]
    if on:
        raise CheckpointError(
            f"{source}: {on[0]}={hparams[on[0]]!r}: nfeval's model has no {UNSUPPORTED[on[0]]} "
            "(expected it off)"
        )
    for name in ("decoder_normalize_before", "no_scale_embedding"):
        if not isinstance(hparams[name], bool):
            raise CheckpointError(f"{source}: {name}={hparams[name]!r}: expected true or false")
    for name in ("dropout", "attention_dropout"):
        if not _probability(hparams[name]):
            raise CheckpointError(f"{source}: {name}={hparams[name]!r}: expected a number in [0, 1)")
    activation = hparams["activation_fn"]
    activation = FAIRSEQ_ACTIVATIONS.get(activation) if isinstance(activation, str) else None
    if activation is None:
        raise CheckpointError(
            f"{source}: activation_fn={hparams['activation_fn']!r}: nfeval computes "
            f"{', '.join(FAIRSEQ_ACTIVATIONS)} (unsupported)"
        )
    return dict(
        norm_position="pre" if hparams["decoder_normalize_before"] else "post",
        scale_embedding=not hparams["no_scale_embedding"],
        activation=activation,
        dropout=float(hparams["dropout"]),
        attn_dropout=float(hparams["attention_dropout"]),
    )


def integer(hparams: dict[str, Any], name: str, default: Any, source: str) -> int | None:
    """Returns the integer setting ``name`` of a saved config (``default`` when absent or null); a
    CheckpointError naming ``source`` and the setting when it is not a whole number."""
    value = hparams.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise CheckpointError(f"{source}: {name}={value!r}: expected a whole number")
    return int(value)


def _probability(value: Any) -> bool:
    """Returns whether ``value`` is a finite number in [0, 1)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and 0 <= value < 1


def check_tensors(hparams: dict[str, Any], state: dict[str, Any], cfg: ModelConfig, source: str) -> None:
    """Raises CheckpointError naming ``source`` when the saved config, where it states them, contradicts
    the tensors: the optional decoder tensors it implies (fairseq builds each exactly when the config
    says) or the sizes of ``cfg`` (read from the tensors)."""
    for name, (words, expected) in _optional_tensors(hparams).items():
        if (name in state) != expected:
            held = "has none" if expected else "holds one"
            raise CheckpointError(
                f"{source}: the saved config ({words}) means {'a' if expected else 'no'} {name!r}, "
                f"but the file {held}"
            )
    sizes = {
        "decoder_embed_dim": cfg.d_model, "decoder_input_dim": cfg.d_model,
        "decoder_output_dim": cfg.d_model, "decoder_ffn_embed_dim": cfg.d_ffn,
        "decoder_layers": cfg.n_layer, "decoder_attention_heads": cfg.n_head,
    }  # fmt: skip
    for name, size in sizes.items():
        if hparams.get(name) is not None and hparams[name] != size:
            raise CheckpointError(f"{source}: {name}={hparams[name]!r} but the tensors say {size}")


def _optional_tensors(hparams: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Returns {decoder tensor: (the config's words, whether they mean fairseq's decoder has it)} for the
    optional tensors the config decides (``decoder_normalize_before`` is known to be there)."""
    no_final = hparams.get("no_decoder_final_norm", False)
    if "decoder_final_norm" in hparams:  # fairseq's old name, read as base_lm_architecture reads it
        no_final = not hparams["decoder_final_norm"]
    before = hparams["decoder_normalize_before"]
    final_words = f"decoder_normalize_before={before!r}, no_decoder_final_norm={no_final!r}"
    out = {
        "decoder.layer_norm.weight": (final_words, before and not no_final),
        "decoder.layernorm_embedding.weight": (
            f"layernorm_embedding={hparams.get('layernorm_embedding', False)!r}",
            bool(hparams.get("layernorm_embedding")),
        ),
    }
    if hparams.get("decoder_learned_pos") is not None:
        learned = hparams["decoder_learned_pos"]
        out["decoder.embed_positions.weight"] = (f"decoder_learned_pos={learned!r}", bool(learned))
    if hparams.get("share_decoder_input_output_embed") is False:
        out["decoder.output_projection.weight"] = ("share_decoder_input_output_embed=False", True)
    return out


def normformer_disagreements(hparams: dict[str, Any], cfg: ModelConfig, source: str) -> list[str]:
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
    ``hparams`` (read from ``config_key``: ``config_key``); errors name ``source`` and the
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
    settings = decoder_settings(hparams, source)
    first = "decoder.layers.0."
    emb = _tensor(state, "decoder.embed_tokens.weight", source, ndim=2)
    n_head, head_gains = _head_count(state, hparams, source, emb, config_key)
    pad = integer(hparams, "pad", 1, source)
    learned = "decoder.embed_positions.weight" in state
    max_len = (
        (_tensor(state, "decoder.embed_positions.weight", source, ndim=2).shape[0] - pad - 1)
        if learned
        else integer(hparams, "max_target_positions", None, source)
        or integer(hparams, "tokens_per_sample", None, source)
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
    check_tensors(hparams, state, cfg, source)
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
    n_head = integer({"decoder_attention_heads": n_head}, "decoder_attention_heads", 0, source)
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
    hparams = saved_config(ckpt, path)
    model_state = _check_state(ckpt["model"], path)
    key = config_key(ckpt, path)
    cfg, state = convert_state_dict(model_state, hparams, path, head_scale_transpose_bug, key)
    notes = normformer_disagreements(hparams, cfg, path)
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
