"""What a fairseq checkpoint's saved config must say before nfeval computes with its weights.

A fairseq checkpoint keeps its model's hyper-parameters beside the tensors (``cfg["model"]`` since
fairseq 0.10, ``args`` before). Some of them change what the decoder computes and leave no trace in the
tensors: Pre- or Post-LN, the √d embedding scale, the activation, dropout. fairseq fills a missing one
with its own default, which need not be what trained the weights, so the importer requires each of them
(``REQUIRED``) and refuses a file without it. The settings the tensors do show (learned positions, the
final LayerNorm, the embedding LayerNorm, the output projection, the sizes) are checked against the
tensors wherever the config states them; options that change the decoder and that nfeval's model lacks
(``UNSUPPORTED``) are refused when on, never dropped.

fairseq's ``transformer_lm`` build sets ``decoder_normalize_before=True`` whatever was asked
(``base_lm_architecture``), so its own files say True; a file that says False (a fairseq copy of an
nfeval Post-LN run) is read as written: a Post-LN decoder, as fairseq's ``TransformerDecoder`` builds it.
"""

from __future__ import annotations

import math
from typing import Any

from ...base.errors import CheckpointError
from ..model.config import ModelConfig

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
