"""GPT-2 between nfeval's engine and transformers' ``GPT2LMHeadModel``: the config fields and tensor
names, both ways.

``export-hf`` writes an nfeval model that is exactly GPT-2 in transformers' format (``gpt2_config``,
``gpt2_state_dict``, over the one name map ``gpt2_names``); ``read_dir`` reads such a directory (or any
GPT-2 directory the engine computes exactly) back as an engine checkpoint, so that scoring it needs
neither transformers' modelling code (~2 s of imports and loading) nor its forward. A directory with
anything the engine does not compute (another attention scaling, cross-attention, an untied head,
pickled weights, ...) is not read: the reasons say why, and the caller loads it with transformers.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from ...base.errors import CheckpointError, ConfigError
from ...base.jsonio import load_json
from ..checkpoints.checkpoint import Checkpoint
from ..model.config import ModelConfig
from ..model.model import Transformer

# The fields GPT-2 fixes, with the value GPT-2 has; the other fields map onto GPT2Config.
GPT2_FIELDS = {
    "objective": "clm",
    "norm_position": "pre",
    "norm": "layernorm",
    "norm_affine": True,
    "qk_norm": False,
    "v_norm": False,
    "ln_scaling": False,
    "mix_ln_fraction": 0.0,
    "first_block_prenorm": False,
    "qkv_norm": False,
    "attn_gate": None,
    "ffn_glu": False,
    "scale_resids_attn": False,
    "scale_attn": False,
    "scale_fc": False,
    "scale_heads": False,
    "scale_resids": False,
    "positions": "learned",
    "scale_embedding": False,
    "embedding_norm": False,
    "final_norm": True,
}
# nfeval's activation -> GPT2Config.activation_function (exact GELU is "gelu", GPT-2's own "gelu_new")
ACTIVATION_NAMES = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# GPT2Config.activation_function values the engine computes (transformers' ACT2FN names)
ENGINE_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
# GPT2Config fields whose other values change the forward in ways the engine does not compute
GPT2_FIXED = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
LAYER_NORMS = {"attn_norm": "ln_1", "ffn_norm": "ln_2"}
LAYER_CONV1D = {
    "attn.qkv": "attn.c_attn",
    "attn.out_proj": "attn.c_proj",
    "fc1": "mlp.c_fc",
    "fc2": "mlp.c_proj",
}
# the causal-mask buffers old GPT-2 files carry (transformers ignores them on load)
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")


def gpt2_mismatches(cfg: ModelConfig) -> list[str]:
    """Returns the fields (``name=value``) that keep ``cfg`` from being GPT-2; empty when it is GPT-2."""
    fields = [f"{k}={getattr(cfg, k)!r}" for k, v in GPT2_FIELDS.items() if getattr(cfg, k) != v]
    return fields + ([f"activation={cfg.activation!r}"] if cfg.activation not in ACTIVATION_NAMES else [])


def gpt2_config(cfg: ModelConfig, **extra: Any):
    """Returns the ``GPT2Config`` of a GPT-2-shaped nfeval config."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_seq_len,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_inner=cfg.d_ffn,
        activation_function=ACTIVATION_NAMES[cfg.activation],
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.attn_dropout,
        layer_norm_epsilon=cfg.layer_norm_eps,
        tie_word_embeddings=True,
        **extra,
    )


def gpt2_names(n_layer: int) -> tuple[dict[str, str], set[str]]:
    """Returns ({nfeval tensor name: GPT2Model tensor name}, the nfeval names GPT-2 stores transposed,
    its ``Conv1D`` weights)."""
    names = {
        "tok_emb.weight": "wte.weight",
        "pos_emb.weight": "wpe.weight",
        "final_norm.weight": "ln_f.weight",
        "final_norm.bias": "ln_f.bias",
    }
    conv1d = set()
    for i in range(n_layer):
        for ours, theirs in {**LAYER_NORMS, **LAYER_CONV1D}.items():
            names |= {f"blocks.{i}.{ours}.{k}": f"h.{i}.{theirs}.{k}" for k in ("weight", "bias")}
        conv1d |= {f"blocks.{i}.{ours}.weight" for ours in LAYER_CONV1D}
    return names, conv1d


def gpt2_state_dict(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """Returns ``GPT2LMHeadModel`` tensors for an nfeval GPT-2-shaped state dict (Conv1D: transposed)."""
    names, conv1d = gpt2_names(n_layer)
    return {
        f"transformer.{theirs}": state[ours].t().contiguous() if ours in conv1d else state[ours]
        for ours, theirs in names.items()
    }


def engine_config(hf: dict[str, Any]) -> tuple[ModelConfig | None, list[str]]:
    """Returns (the engine config of a GPT-2 ``config.json``, []) or (None, the reasons the engine does
    not compute that model exactly)."""
    if hf.get("model_type") != "gpt2" or "GPT2LMHeadModel" not in (hf.get("architectures") or []):
        return None, [f"model_type={hf.get('model_type')!r}, architectures={hf.get('architectures')!r}"]
    reasons = [f"{k}={hf[k]!r}" for k, v in GPT2_FIXED.items() if k in hf and hf[k] != v]
    activation = ENGINE_ACTIVATIONS.get(hf.get("activation_function", "gelu_new"))
    if activation is None:
        reasons.append(f"activation_function={hf.get('activation_function')!r}")
    if reasons:
        return None, reasons
    d = hf.get("n_embd", 768)
    try:
        cfg = ModelConfig(
            vocab_size=hf.get("vocab_size", 50257),
            n_layer=hf.get("n_layer", 12),
            d_model=d,
            n_head=hf.get("n_head", 12),
            d_ffn=hf.get("n_inner") or 4 * d,
            max_seq_len=hf.get("n_positions", 1024),
            activation=activation,
            layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            init="gpt2",
            **GPT2_FIELDS,
        )
    except (ConfigError, TypeError, ValueError) as e:  # a mistyped field: transformers reads or refuses it
        return None, [str(e)]
    return cfg, []


def engine_checkpoint(
    tensors: dict[str, torch.Tensor], cfg: ModelConfig, path: str
) -> tuple[Checkpoint | None, list[str]]:
    """Returns (the engine checkpoint of a GPT2LMHeadModel's (or its base model's) tensors, read: a
    meta-device model and the tensors ``checkpoint.materialize`` builds it from, no tokenizer; []) or
    (None, the tensors that do not map: missing, unexpected, of another shape or an untied head)."""
    prefixed = {k.removeprefix("transformer."): v for k, v in tensors.items() if not k.endswith(MASK_BUFFERS)}
    head = prefixed.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, prefixed.get("wte.weight", head)):
        return None, ["lm_head.weight: an output projection not tied to the token embedding"]
    names, conv1d = gpt2_names(cfg.n_layer)
    missing = sorted(set(names.values()) - set(prefixed))
    unexpected = sorted(set(prefixed) - set(names.values()))
    if missing or unexpected:
        return None, [f"missing tensors {missing[:3]}" if missing else f"unexpected tensors {unexpected[:3]}"]
    state = {
        ours: prefixed[theirs].t() if ours in conv1d else prefixed[theirs] for ours, theirs in names.items()
    }
    with torch.device("meta"):
        skeleton = Transformer(cfg)
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    wrong = [k for k, v in state.items() if tuple(v.shape) != expected[k]]
    if wrong:
        return None, [f"{wrong[0]}: shape {tuple(state[wrong[0]].shape)}, config says {expected[wrong[0]]}"]
    state = {k: v.contiguous() for k, v in state.items()}
    return Checkpoint(model=skeleton, tokenizer=None, config=cfg, path=path, fingerprint="", state=state), []


def read_dir(path: str) -> tuple[Checkpoint | None, list[str]]:
    """Returns (the engine checkpoint of the GPT-2 directory ``path``, read as ``engine_checkpoint``
    returns it, []) or (None, why the engine does not compute it: not GPT-2, a field or tensor it does
    not map, weights not in safetensors)."""
    cfg, reasons = engine_config(load_json(os.path.join(path, "config.json")))
    if cfg is None:
        return None, reasons
    names = sorted(os.listdir(path))
    files = [os.path.join(path, n) for n in names if n.endswith(".safetensors")]
    others = [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    if not files or others:
        return None, [f"weights not (only) in safetensors: {others or 'none found'}"]
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(file, framework="pt") as f:
                tensors |= {k: f.get_tensor(k) for k in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:  # checkpoint.weight_shapes says the same
            raise CheckpointError(f"{file}: truncated or corrupt safetensors file ({e})") from None
    return engine_checkpoint(tensors, cfg, path)
