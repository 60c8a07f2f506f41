"""Model configuration and presets.

A model is a ``ModelConfig``. Presets combine a *size* (fairseq's NormFormer recipe sizes plus CPU
sizes for tests and demos) with an *architecture* (which normalisation ops are on) and the *recipe*
of the objective (``RECIPES``: fairseq's LM recipe for causal LMs, RoBERTa's for masked LMs). A
preset name is ``ARCH-SIZE`` (``normformer-125M``, ``prenorm-tiny``) or a bare size (Pre-LN baseline).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ...base.errors import ConfigError
from .conflicts import conflicting_flags
from .fields import check_fields
from .placements import (
    DYT_ALPHA_DEFAULT,
    DYT_ALPHAS,
    FINAL_NORM_POSITIONS,
    NORM_POSITIONS,
    NORMS,
    PLACEMENT_NAMES,
    PLACEMENTS,
    Placement,
)

HEAD_SCALE_POSITIONS = ("after_out_proj", "before_out_proj")
# Gated attention (Qiu et al. 2025): one gate value per head, or one per channel of the attention output
ATTN_GATES = ("headwise", "elementwise")
# gelu_tanh: GPT-2's gelu_new; silu with ffn_glu: SwiGLU (nGPT's models)
ACTIVATIONS = ("gelu", "gelu_tanh", "relu_squared", "silu")
POSITION_TYPES = ("learned", "sinusoidal")
OBJECTIVES = ("clm", "mlm")
# How the weights are drawn (nfeval.engine.model.model.init_weights): fairseq's transformer_lm, GPT-2's
# (nfeval's only init before the field existed), fairseq's init_bert_params (RoBERTa) or OLMo's
# full_megatron (HybridNorm's).
INIT_SCHEMES = ("fairseq", "gpt2", "bert", "megatron")
MODEL_CHOICES = {
    "norm_position": NORM_POSITIONS,
    "norm": NORMS,
    "normformer_norm": NORMS,
    "head_scale_position": HEAD_SCALE_POSITIONS,
    "attn_gate": ATTN_GATES,
    "activation": ACTIVATIONS,
    "positions": POSITION_TYPES,
    "objective": OBJECTIVES,
    "init": INIT_SCHEMES,
}
# The sizes that shape the weights: a stored config without them describes no model (no silent defaults).
REQUIRED_MODEL_FIELDS = ("vocab_size", "n_layer", "d_model", "n_head", "d_ffn")


@dataclass
class ModelConfig:
    """Everything a forward pass needs. Every architecture (norm placement, norm kind, NormFormer's ops and
    the controls of its Table 4) is a flag on the one Block; ``validate`` refuses combinations that make no
    sense."""

    vocab_size: int = 50304
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_ffn: int = 3072
    max_seq_len: int = 2048
    objective: str = "clm"  # clm: causal decoder; mlm: bidirectional encoder
    norm_position: str = "pre"  # one of NORM_POSITIONS
    # every norm of the model: "layernorm", "rmsnorm" (torch.nn.RMSNorm), "dyt" or "derf"
    norm: str = "layernorm"
    norm_affine: bool = True  # learned gain (and, for LayerNorm and DyT, bias) on every norm
    qk_norm: bool = False  # norm of each head's queries and keys over head_dim, before the KV cache
    # norm of each head's values over head_dim, before the KV cache: with qk_norm, HybridNorm's QKV-Norm as
    # its authors' OLMo code has it (q_norm, k_norm and v_norm of size d_model // n_heads, one gain shared by
    # the heads: dense_model/olmo/model.py, OLMoBlock.__init__ and .attention)
    v_norm: bool = False
    # α0 of the point-wise norms (POINTWISE_NORMS: DyT, Zhu et al. 2025; Derf, Chen et al. 2025): the
    # attention sub-layer's norms, the others. Both papers' default is 0.5; DyT's LLaMA recipe gives
    # attention more, and less to wider models.
    dyt_alpha_attn: float = 0.5
    dyt_alpha_other: float = 0.5
    # LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth"): the output of each norm before a sub-layer
    # (attn_norm, ffn_norm) scaled by 1/sqrt(ℓ), ℓ the block's 1-based index
    ln_scaling: bool = False
    # Mix-LN (Li et al. 2024): the first floor(mix_ln_fraction · n_layer) blocks Post-LN, the rest Pre-LN
    # (``post_ln_layers``; the paper's α is 0.25)
    mix_ln_fraction: float = 0.0
    # HybridNorm* (Zhuo et al. 2025): under norm_position="hybrid", the first block Pre-LN (its q, k, v
    # norms kept), as the authors' norm_pos_special_config {0: attn_norm, no ffn_residual_after_norm}
    first_block_prenorm: bool = False
    # NormFormer ops, named as fairseq's transformer_layer.py flags.
    scale_attn: bool = False  # LayerNorm on the attention output, before the residual add
    scale_fc: bool = False  # LayerNorm on the FFN-wide hidden, after the activation
    scale_heads: bool = False  # HeadScale: one learned gain per head
    scale_resids: bool = False  # ResScale: per-channel gain on the FFN residual
    # fairseq scales the heads after out_proj (bias included); the paper's formula scales before.
    head_scale_position: str = "after_out_proj"
    # fairseq before 2021-11-03 scaled with einsum 'tbhd,h->tbdh', which also permutes channels.
    head_scale_transpose_bug: bool = False
    # NormFormer's Table 4 controls (Shleifer et al. 2021, §5), each documented in model.py's op order.
    # These read the controls' names as the paper's Table 4 gives them, without its appendix at hand. "Three
    # more LayerNorms" is taken to be one LN on each of q, k and v; "an LN without bias and mean-centring"
    # is an RMSNorm in place of NormFormer's extra LNs; GeGLU takes the FFN LN's place.
    ffn_glu: bool = False  # GeGLU FFN: fc1 gives 2·d_ffn, activation(first half) · second half -> fc2
    scale_resids_attn: bool = False  # λresid on the attention residual too (fairseq's w_resid is FFN only)
    resid_scale_scalar: bool = False  # each λresid is one learned scalar instead of one per channel
    normformer_norm: str | None = None  # kind of NormFormer's extra norms (None: as ``norm``)
    qkv_norm: bool = False  # "three more LayerNorms": on the query, key and value projections (d_model)
    # Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models"): the attention output
    # times σ(x·W + b), x the sub-layer's (normalised) input, before out_proj; ATTN_GATES (None: off)
    attn_gate: str | None = None
    positions: str = "learned"
    scale_embedding: bool = False  # multiply token embeddings by sqrt(d_model), as fairseq
    activation: str = "gelu"
    dropout: float = 0.0
    attn_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1  # fairseq's padding index; also offsets sinusoidal positions
    # default: on for pre/sandwich/olmo2/hybrid (fairseq's Pre-LN, Gemma 2, OLMo 2, HybridNorm's OLMo),
    # off for post/deepnorm (fairseq's Post-LN, DeepNet), whose blocks already end with a norm
    final_norm: bool | None = None
    embedding_norm: bool = False  # LayerNorm after the embeddings (RoBERTa-style encoders)
    # A stored config without the field was trained with gpt2's (the only init before it existed).
    init: str = "gpt2"

    def __post_init__(self) -> None:
        if self.final_norm is None:
            self.final_norm = self.norm_position in FINAL_NORM_POSITIONS
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
        for name in ("dyt_alpha_attn", "dyt_alpha_other"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r}: expected a positive number")
        if not 0 <= self.mix_ln_fraction <= 1:
            raise ConfigError(
                f"{source}: mix_ln_fraction={self.mix_ln_fraction!r}: expected a number in [0, 1]"
            )
        if self.d_model % self.n_head:
            raise ConfigError(f"{source}: d_model={self.d_model} is not divisible by n_head={self.n_head}")
        conflict = conflicting_flags(self)
        if conflict:
            raise ConfigError(f"{source}: {conflict}")

    @property
    def post_ln_layers(self) -> int:
        """Returns how many blocks, from the first, are Post-LN under Mix-LN: floor(mix_ln_fraction ·
        n_layer), as the paper's ⌊αL⌋ and its code's int(α·L) (3 of 12 and 6 of 24 at α = 0.25; none
        of 2), with 1e-9 of slack so that a decimal fraction counts what it says (0.29 of 100: 29)."""
        return math.floor(self.mix_ln_fraction * self.n_layer + 1e-9)

    @property
    def placement(self) -> Placement:
        """Returns the record of ``norm_position``."""
        return PLACEMENTS[self.norm_position]

    def layer_placement(self, layer: int) -> str:
        """Returns the norm placement of the block at 0-based index ``layer``: "post" for Mix-LN's first
        ``post_ln_layers`` blocks, "pre" for HybridNorm*'s first, ``norm_position`` otherwise."""
        if layer < self.post_ln_layers:
            return "post"
        return "pre" if layer == 0 and self.first_block_prenorm else self.norm_position

    @property
    def ngpt(self) -> bool:
        """Whether this is nGPT's normalised Transformer (``norm_position="ngpt"``: ``ngpt.py``)."""
        return self.placement.hypersphere

    @property
    def recipe_overrides(self) -> dict[str, float]:
        """Returns the TrainConfig fields this model trains under unless its run sets them (nGPT: no weight
        decay, no warm-up), as its placement declares them."""
        return dict(self.placement.recipe)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def attn_gate_width(self) -> int:
        """Returns the gate values per token of each block's attention gate: one per head (headwise), one
        per channel (elementwise), or 0 without a gate."""
        return {"headwise": self.n_head, "elementwise": self.d_model}.get(self.attn_gate, 0)

    @property
    def causal(self) -> bool:
        return self.objective == "clm"

    @property
    def architecture(self) -> str:
        """Returns a short name for the normalisation scheme (the arch preset it matches, if any)."""
        for name, flags in ARCHITECTURES.items():
            if all(getattr(self, k) == v for k, v in flags.items()):
                return name
        on = [k for k in BLOCK_FLAGS if getattr(self, k)]
        kinds = [
            f"{k}={getattr(self, k)}" for k in ("norm", "normformer_norm") if getattr(self, k) in NORMS[1:]
        ]
        if not self.norm_affine:
            kinds.append("norm_affine=False")
        numbers = (*DYT_ALPHAS, "mix_ln_fraction", "attn_gate")
        kinds += [f"{f}={getattr(self, f)!r}" for f in numbers if getattr(self, f) != PRE_LN[f]]
        return "+".join([PLACEMENT_NAMES[self.norm_position], *on, *kinds])

    def norm_param_count(self, dim: int, kind: str | None = None) -> int:
        """Returns the parameters of one norm over ``dim`` (of kind ``kind``, default ``norm``): DyT's α,
        Derf's α and s and, with ``norm_affine``, each kind's gain (and every bias but RMSNorm's)."""
        kind = kind or self.norm
        scalars = {"dyt": 1, "derf": 2}.get(kind, 0)
        if not self.norm_affine:
            return scalars
        return scalars + dim * (1 if kind == "rmsnorm" else 2)

    def normformer_param_count(self) -> int:
        """Returns the number of parameters that NormFormer's ops and its Table 4 controls add over the
        same-size Pre-LN model (the placements' own norms are not counted)."""
        d, f, extra = self.d_model, self.d_ffn, self.normformer_norm
        gain = 1 if self.resid_scale_scalar else d
        per_layer = self.ffn_glu * (d * f + f) + (self.scale_resids + self.scale_resids_attn) * gain
        per_layer += self.scale_heads * self.n_head
        per_layer += self.norm_param_count(d, extra) * (self.scale_attn + 3 * self.qkv_norm)
        per_layer += self.norm_param_count(f, extra) * self.scale_fc
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
    # 12 layers × d 128, the ``reproduce --scale small`` model: Pre-LN's gradient mismatch (layer-0 ÷ last
    # fc2 gradient over updates 1-100) is 1.77 here (benchmarks/RESULTS.md, "Gradient mismatch by shape")
    "small": dict(n_layer=12, d_model=128, n_head=4, d_ffn=512, max_seq_len=512),
    "125M": dict(n_layer=12, d_model=768, n_head=12, d_ffn=3072, max_seq_len=2048),
    "355M": dict(n_layer=24, d_model=1024, n_head=16, d_ffn=4096, max_seq_len=2048),
    "1.3B": dict(n_layer=24, d_model=2048, n_head=32, d_ffn=8192, max_seq_len=2048),
    "2.7B": dict(n_layer=32, d_model=2560, n_head=32, d_ffn=10240, max_seq_len=2048),
    # Table 4's width control: the 125M baseline widened 768 -> 780 (head_dim 65; d_ffn kept): 127.7M
    # parameters at vocab 50304, the paper's "127M" (``prenorm-125M-wide``).
    "125M-wide": dict(n_layer=12, d_model=780, n_head=12, d_ffn=3072, max_seq_len=2048),
}

# The boolean block flags; an architecture preset fixes each of them and the norm fields.
BLOCK_FLAGS = (
    "scale_attn", "scale_fc", "scale_heads", "scale_resids", "qk_norm", "ffn_glu", "scale_resids_attn",
    "resid_scale_scalar", "qkv_norm", "ln_scaling", "first_block_prenorm", "v_norm",
)  # fmt: skip
PRE_LN = dict(
    norm_position="pre", norm="layernorm", norm_affine=True, normformer_norm=None, mix_ln_fraction=0.0,
    attn_gate=None, **dict.fromkeys(BLOCK_FLAGS, False), **dict.fromkeys(DYT_ALPHAS, DYT_ALPHA_DEFAULT),
)  # fmt: skip
NORMFORMER_OPS = dict(scale_attn=True, scale_fc=True, scale_heads=True)
HYBRID_QKV_NORM = dict(qk_norm=True, v_norm=True)  # HybridNorm's QKV-Norm: each head's q, k and v

# The paper's two recipes, each applied to every preset of its objective (explicit overrides win):
# fairseq's transformer_lm_gpt for causal LMs (the NormFormer paper's models) and fairseq's
# examples/roberta (RoBERTa-base) for masked LMs. "model" holds ModelConfig fields; "train" the
# TrainConfig fields a run takes when it leaves them unset (train_config.training_recipe), with
# "block_size" the training sequence length (at most the model's max_seq_len; None: max_seq_len).
# Both are Pre-LN with a final LayerNorm (ModelConfig.final_norm's default), warm-up then linear decay.
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "fairseq_lm": {
        "model": dict(positions="sinusoidal", scale_embedding=True, init="fairseq", embedding_norm=False),
        "train": dict(beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=0.01, warmup=0.01, block_size=None),
    },
    "roberta": {
        "model": dict(positions="learned", scale_embedding=False, init="bert", embedding_norm=True),
        "train": dict(beta1=0.9, beta2=0.98, eps=1e-6, weight_decay=0.01, warmup=0.01, block_size=512),
    },
}
OBJECTIVE_RECIPES = {"clm": "fairseq_lm", "mlm": "roberta"}

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "prenorm": PRE_LN,
    "normformer": {**PRE_LN, **NORMFORMER_OPS},
    "normformer-resscale": {**PRE_LN, **NORMFORMER_OPS, "scale_resids": True},
    "postnorm": {**PRE_LN, "norm_position": "post"},
    "sandwich": {**PRE_LN, "norm_position": "sandwich"},  # Gemma 2's norm order
    # OLMo 2's norm order alone (OLMo 2 itself: + qk_norm=True, norm="rmsnorm"), so its effect and
    # QK-norm's (``qknorm``) are measured apart
    "olmo2norm": {**PRE_LN, "norm_position": "olmo2"},
    "deepnorm": {**PRE_LN, "norm_position": "deepnorm"},
    "qknorm": {**PRE_LN, "qk_norm": True},
    "rmsprenorm": {**PRE_LN, "norm": "rmsnorm"},
    # Peri-LN (Kim et al., ICML 2025): x + N(f(N(x))) is sandwich's block exactly, under the paper's name
    # (a config of it is named "sandwich", the entry above). The paper's optional norm of the embeddings
    # is ``embedding_norm``, a field of the recipe every candidate of a comparison shares: the preset
    # leaves it to the recipe (off for causal LMs, on for masked LMs), as it does for every architecture.
    "periln": {**PRE_LN, "norm_position": "sandwich"},
    # LayerNorm Scaling (Sun et al. 2025): Pre-LN with each block's two norms scaled by 1/sqrt(ℓ)
    "lnscaling": {**PRE_LN, "ln_scaling": True},
    # Mix-LN (Li et al. 2024): Post-LN in the first floor(0.25 · n_layer) blocks (none of mixln-tiny's 2: it
    # is Pre-LN; 1 of the 6 that bakeoff/reproduce's tiny scale trains; 3 of small's 12), then Pre-LN
    "mixln": {**PRE_LN, "mix_ln_fraction": 0.25},
    # DyT (Zhu et al. 2025): every norm γ·tanh(α·x) + β, α0 = 0.5 (the paper's default) everywhere
    "dyt": {**PRE_LN, "norm": "dyt"},
    # Derf (Chen et al. 2025): every norm γ·erf(α·x + s) + β, α0 = 0.5 and s0 = 0 (the paper's defaults)
    "derf": {**PRE_LN, "norm": "derf"},
    # Gated attention (Qiu et al. 2025): Pre-LN with σ(x·W + b) on the attention output before out_proj, one
    # gate per channel (the paper's best, "elementwise") or per head (its cheapest, "headwise")
    "gatedattn": {**PRE_LN, "attn_gate": "elementwise"},
    "gatedattnhead": {**PRE_LN, "attn_gate": "headwise"},
    # HybridNorm (Zhuo et al. 2025): x + attn(x) with each head's q, k and v normalised over head_dim
    # (QKV-Norm: ``qk_norm`` and ``v_norm``, as the authors' code) and no norm before attention; then
    # y = N(x), y + FFN(y); a final norm (OLMo's ln_f)
    "hybridnorm": {**PRE_LN, **HYBRID_QKV_NORM, "norm_position": "hybrid"},
    # HybridNorm*: the same with the first block Pre-LN (QKV-Norm kept)
    "hybridnormstar": {**PRE_LN, **HYBRID_QKV_NORM, "norm_position": "hybrid", "first_block_prenorm": True},
    # nGPT (Loshchilov et al. 2025): no norm layers, hidden states and weights on the unit hypersphere,
    # h <- Norm(h + |α|·(Norm(f(h)) - h)) with its learned scalings (ngpt.py); the recipe's FFN (the paper's
    # SwiGLU u and ν: ``ffn_glu``); trains without weight decay or warm-up (``recipe_overrides``)
    "ngpt": {**PRE_LN, "norm_position": "ngpt"},
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
