"""Model configuration and presets.

A model is a ``ModelConfig``. Presets combine a *size* (fairseq's NormFormer recipe sizes plus CPU
sizes for tests and demos) with an *architecture* (which normalisation ops are on) and the *recipe*
of the objective (``RECIPES``: fairseq's LM recipe for causal LMs, RoBERTa's for masked LMs). A
preset name is ``ARCH-SIZE`` (``normformer-125M``, ``prenorm-tiny``) or a bare size (Pre-LN baseline).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.errors import ConfigError, DataError, MissingDataError

NORM_POSITIONS = ("pre", "post")
HEAD_SCALE_POSITIONS = ("after_out_proj", "before_out_proj")
ACTIVATIONS = ("gelu", "relu_squared")
POSITION_TYPES = ("learned", "sinusoidal")
OBJECTIVES = ("clm", "mlm")
# How the weights are drawn (nfeval.engine.model.init_weights): fairseq's transformer_lm, GPT-2's
# (nfeval's only init before the field existed) or fairseq's init_bert_params (RoBERTa).
INIT_SCHEMES = ("fairseq", "gpt2", "bert")
MODEL_CHOICES = {
    "norm_position": NORM_POSITIONS,
    "head_scale_position": HEAD_SCALE_POSITIONS,
    "activation": ACTIVATIONS,
    "positions": POSITION_TYPES,
    "objective": OBJECTIVES,
    "init": INIT_SCHEMES,
}
# The sizes that shape the weights: a stored config without them describes no model (no silent defaults).
REQUIRED_MODEL_FIELDS = ("vocab_size", "n_layer", "d_model", "n_head", "d_ffn")


@dataclass
class ModelConfig:
    """Everything a forward pass needs. Pre-LN, Post-LN and NormFormer differ only in the flags."""

    vocab_size: int = 50304
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_ffn: int = 3072
    max_seq_len: int = 2048
    objective: str = "clm"  # clm: causal decoder; mlm: bidirectional encoder
    norm_position: str = "pre"
    # NormFormer ops, named as fairseq's transformer_layer.py flags.
    scale_attn: bool = False  # LayerNorm on the attention output, before the residual add
    scale_fc: bool = False  # LayerNorm on the FFN-wide hidden, after the activation
    scale_heads: bool = False  # HeadScale: one learned gain per head
    scale_resids: bool = False  # ResScale: per-channel gain on the FFN residual
    # fairseq scales the heads after out_proj (bias included); the paper's formula scales before.
    head_scale_position: str = "after_out_proj"
    # fairseq before 2021-11-03 scaled with einsum 'tbhd,h->tbdh', which also permutes channels.
    head_scale_transpose_bug: bool = False
    positions: str = "learned"
    scale_embedding: bool = False  # multiply token embeddings by sqrt(d_model), as fairseq
    activation: str = "gelu"
    dropout: float = 0.0
    attn_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1  # fairseq's padding index; also offsets sinusoidal positions
    final_norm: bool | None = None  # default: on for Pre-LN, off for Post-LN (fairseq)
    embedding_norm: bool = False  # LayerNorm after the embeddings (RoBERTa-style encoders)
    # A stored config without the field was trained with gpt2's (the only init before it existed).
    init: str = "gpt2"

    def __post_init__(self) -> None:
        if self.final_norm is None:
            self.final_norm = self.norm_position == "pre"
        self.validate()

    def validate(self, source: str = "ModelConfig") -> None:
        """Raises ConfigError naming ``source`` and the first field of the wrong type or out of range."""
        check_fields(type(self), self.__dict__, source, choices=MODEL_CHOICES)
        for name in (*REQUIRED_MODEL_FIELDS, "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r}: expected a positive integer")
        for name in ("dropout", "attn_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r}: expected a number in [0, 1)")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"{source}: layer_norm_eps={self.layer_norm_eps!r}: expected a positive number")
        if self.d_model % self.n_head:
            raise ConfigError(f"{source}: d_model={self.d_model} is not divisible by n_head={self.n_head}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def causal(self) -> bool:
        return self.objective == "clm"

    @property
    def architecture(self) -> str:
        """Returns a short name for the normalisation scheme (the arch preset it matches, if any)."""
        for name, flags in ARCHITECTURES.items():
            if all(getattr(self, k) == v for k, v in flags.items()):
                return name
        on = [k for k in ("scale_attn", "scale_fc", "scale_heads", "scale_resids") if getattr(self, k)]
        return f"{self.norm_position}norm+" + "+".join(on)

    def normformer_param_count(self) -> int:
        """Returns the number of parameters the NormFormer ops add over the same-size Pre-LN model."""
        per_layer = 0
        if self.scale_attn:
            per_layer += 2 * self.d_model
        if self.scale_fc:
            per_layer += 2 * self.d_ffn
        if self.scale_heads:
            per_layer += self.n_head
        if self.scale_resids:
            per_layer += self.d_model
        return self.n_layer * per_layer

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> ModelConfig:
        """Returns a config from a stored dict (a checkpoint's config.json); the size fields are required.

        Unknown keys, missing size fields and values of the wrong type fail naming ``source`` and the field.
        """
        missing = [name for name in REQUIRED_MODEL_FIELDS if name not in d]
        if missing:
            raise ConfigError(f"{source}: missing model config field(s) {missing} (no defaults for sizes)")
        values = check_fields(cls, d, source, choices=MODEL_CHOICES)
        cfg = cls(**values)
        cfg.validate(source)
        return cfg

    def replace(self, **changes: Any) -> ModelConfig:
        """Returns a copy with the given fields changed."""
        return dataclasses.replace(self, **changes)


# Sizes from fairseq's NormFormer recipe (examples/normformer), plus CPU sizes.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(n_layer=2, d_model=64, n_head=4, d_ffn=256, max_seq_len=256),
    "small": dict(n_layer=6, d_model=256, n_head=8, d_ffn=1024, max_seq_len=512),
    "125M": dict(n_layer=12, d_model=768, n_head=12, d_ffn=3072, max_seq_len=2048),
    "355M": dict(n_layer=24, d_model=1024, n_head=16, d_ffn=4096, max_seq_len=2048),
    "1.3B": dict(n_layer=24, d_model=2048, n_head=32, d_ffn=8192, max_seq_len=2048),
    "2.7B": dict(n_layer=32, d_model=2560, n_head=32, d_ffn=10240, max_seq_len=2048),
}

# The paper's two recipes, each applied to every preset of its objective (explicit overrides win):
# fairseq's transformer_lm_gpt for causal LMs (the NormFormer paper's models) and fairseq's
# examples/roberta (RoBERTa-base) for masked LMs. "model" holds ModelConfig fields; "train" the
# TrainConfig fields a run takes when it leaves them unset (train_config.training_recipe), with
# "block_size" the training sequence length (at most the model's max_seq_len; None: max_seq_len).
# Both are Pre-LN with a final LayerNorm (ModelConfig.final_norm's default), warm-up then linear decay.
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "fairseq_lm": {
        "model": dict(positions="sinusoidal", scale_embedding=True, init="fairseq", embedding_norm=False),
        "train": dict(beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=0.01, block_size=None),
    },
    "roberta": {
        "model": dict(positions="learned", scale_embedding=False, init="bert", embedding_norm=True),
        "train": dict(beta1=0.9, beta2=0.98, eps=1e-6, weight_decay=0.01, block_size=512),
    },
}
OBJECTIVE_RECIPES = {"clm": "fairseq_lm", "mlm": "roberta"}

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "prenorm": dict(
        norm_position="pre", scale_attn=False, scale_fc=False, scale_heads=False, scale_resids=False
    ),
    "normformer": dict(
        norm_position="pre", scale_attn=True, scale_fc=True, scale_heads=True, scale_resids=False
    ),
    "normformer-resscale": dict(
        norm_position="pre", scale_attn=True, scale_fc=True, scale_heads=True, scale_resids=True
    ),
    "postnorm": dict(
        norm_position="post", scale_attn=False, scale_fc=False, scale_heads=False, scale_resids=False
    ),
}

# Vocab sizes for CPU presets are small so the embedding does not dominate a tiny model.
CPU_VOCAB = {"tiny": 512, "small": 8192}


def parse_preset(name: str) -> tuple[str, str]:
    """Returns (architecture, size) for ``ARCH-SIZE`` or a bare ``SIZE``; raises ValueError if unknown."""
    if name in SIZES:
        return "prenorm", name
    for arch in sorted(ARCHITECTURES, key=len, reverse=True):
        if name.startswith(arch + "-") and name[len(arch) + 1 :] in SIZES:
            return arch, name[len(arch) + 1 :]
    raise ConfigError(
        f"unknown preset {name!r}: expected SIZE or ARCH-SIZE with ARCH in {sorted(ARCHITECTURES)} "
        f"and SIZE in {list(SIZES)}"
    )


def preset(name: str, **overrides: Any) -> ModelConfig:
    """Returns the ModelConfig of a preset name (see ``parse_preset``): its size and architecture, the
    recipe of its objective (``overrides["objective"]``, default clm), then the field overrides."""
    arch, size = parse_preset(name)
    recipe = RECIPES[OBJECTIVE_RECIPES.get(overrides.get("objective", "clm"), "fairseq_lm")]
    fields: dict[str, Any] = {**SIZES[size], **ARCHITECTURES[arch], **recipe["model"]}
    if size in CPU_VOCAB:
        fields["vocab_size"] = CPU_VOCAB[size]
    fields.update(overrides)
    return ModelConfig(**fields)


# --- typed validation of config dataclasses ---------------------------------------------------------------


CONFIG_NAMES = {"ModelConfig": "model config", "TrainConfig": "training config"}


def _type_name(tp: Any) -> str:
    """Returns a reader's name for an annotation: 'an integer', 'a number or null', ..."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    names = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        type(None): "null",
        dict: "an object",
        list: "a list",
    }
    return names.get(typing.get_origin(tp) or tp, str(tp))


def _coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Returns (accepted, value) for ``value`` against annotation ``tp`` (an int is widened to a float,
    an integral float narrowed to an int)."""
    if tp is Any:
        return True, value
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, out = _coerce(value, arg)
            if ok:
                return True, out
        return False, value
    base = typing.get_origin(tp) or tp
    if base is type(None):
        return value is None, value
    if base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if base is int:  # an integral float (1e9 from JSON, 10.0 from a float flag) is that integer
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return isinstance(value, int) and not isinstance(value, bool), value
    return isinstance(value, base), value


def check_fields(
    cls: type, values: Mapping[str, Any], source: str | Mapping[str, str], choices: Mapping[str, tuple] = {}
) -> dict[str, Any]:
    """Returns ``values`` checked against the field annotations of dataclass ``cls`` (ints widened to float).

    ``source`` names where the values came from (a file, ``--set``, a flag), or maps each field to its
    source. Unknown fields, values of the wrong type and values outside ``choices`` raise ConfigError
    naming the source, the field, the value and what was expected.
    """
    hints = typing.get_type_hints(cls)
    where = (
        (lambda name: source.get(name, "config")) if isinstance(source, Mapping) else (lambda name: source)
    )
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ConfigError(
            f"{where(unknown[0])}: unknown {CONFIG_NAMES.get(cls.__name__, cls.__name__)} field(s) "
            f"{unknown}; expected a subset of {sorted(hints)}"
        )
    out = {}
    for name, value in values.items():
        ok, out[name] = _coerce(value, hints[name])
        if not ok:
            raise ConfigError(f"{where(name)}: {name}={value!r}: expected {_type_name(hints[name])}")
        if name in choices and value is not None and value not in choices[name]:
            raise ConfigError(f"{where(name)}: {name}={value!r}: expected one of {list(choices[name])}")
    return out


def load_json(path: str, hint: str = "") -> Any:
    """Returns the parsed JSON object in ``path``: the one reader of JSON files.

    A missing file raises MissingDataError, unreadable or invalid JSON (or a top level that is not an
    object) DataError; both name the file (and the line), followed by ``hint`` (what to do) if given.
    """
    suffix = f"; {hint}" if hint else ""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: file not found{suffix}") from None
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}{suffix}"
        ) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}){suffix}") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror}){suffix}") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}{suffix}")
    return data
