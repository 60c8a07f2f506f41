"""The parts of a run's TrainConfig that depend on its scale: Table 4's width controls and GeGLU's matched
FFN, and Table 5's hyperparameter settings (``plan.RunSpec.widen_hidden``, ``.widen_to_match``,
``.ffn_matched_to`` and ``.setting``). Parameters are counted as the model a run trains has them: its
preset with its objective's recipe (sinusoidal positions: none to learn) and the scale's vocabulary,
embeddings included (the output projection is tied to them).

The paper's width control (``widen_hidden``): the paper widened its 125M baseline's hidden size 768 → 780,
"about 3M parameters". fairseq's ``transformer_lm_gpt`` keeps ``decoder_ffn_embed_dim`` at 3072 unless told
otherwise; with it kept, 780 adds 2.38M (+1.93%, or +2.09% of the parameters outside the embeddings),
below the paper's 3M. With the FFN widened with it (4 × 780 = 3120) it adds 3.28M (+2.65%; +3.15% outside
the embeddings), a 127.0M model: the reading that gives the paper's "about 3M". nfeval takes that one: the
FFN keeps the baseline's d_ffn / d_model ratio, and the threshold is the paper's excess by this count,
embeddings included, derived from the 125M shape (``paper_widening``) rather than written down. At any
scale the widened run is the smallest d_model above the baseline's that its heads divide (head_dim
integral) whose parameters exceed the baseline's by at least that share (``wider_hidden``); at 125M that
is 780 itself. One step of n_head channels already adds more at smaller widths: d 64 → 68 at tiny,
128 → 132 at small.

The parameter-matched width control (``widen_to_match``): the baseline with its FFN widened to the
smallest d_ffn that gives it at least the parameters of the architecture it matches, so the two differ by
less than one FFN unit per layer (2·d_model + 1 parameters each), well within 1% at every size.

GeGLU at matched parameters (``ffn_matched_to``): GeGLU's fc1 gives two halves, so an FFN unit costs
3·d_model + 2 parameters against 2·d_model + 1; its d_ffn is the width whose parameter count comes nearest
the matched architecture's (the narrower on a tie), about 2/3 of the baseline's: within half an FFN unit
per layer of it.
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction
from typing import Any

import torch

from ...engine.model.config import ARCHITECTURES, ModelConfig, preset
from ...engine.model.model import Transformer
from ...engine.training.train_config import TrainConfig
from ..scales import SCALES
from .plan import PAPER_WIDTH_CONTROL, RUNS, TABLE5_SETTINGS, RunSpec, Scale


def parameter_count(cfg: ModelConfig) -> int:
    """Returns the number of parameters of a model of ``cfg`` (built on the meta device: no memory)."""
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(cfg).parameters())


def excess(base: ModelConfig, cfg: ModelConfig) -> Fraction:
    """Returns the parameters of ``cfg`` over those of ``base``, as a share of ``base``'s (exact)."""
    count = parameter_count(base)
    return Fraction(parameter_count(cfg) - count, count)


def matched_ffn(base: ModelConfig, match_arch: str) -> dict[str, int]:
    """Returns {d_ffn}: the smallest FFN width that gives ``base`` at least the parameters of ``base`` as
    architecture ``match_arch``."""
    target = parameter_count(base.replace(**ARCHITECTURES[match_arch]))
    # one more FFN unit in every layer: a row of fc1 (with its bias) and a column of fc2
    per_unit = base.n_layer * (2 * base.d_model + 1)
    d_ffn = base.d_ffn + max(0, -(-(target - parameter_count(base)) // per_unit))
    while parameter_count(base.replace(d_ffn=d_ffn)) < target:  # the GeGLU FFN counts a unit twice
        d_ffn += 1
    return {"d_ffn": d_ffn}


def nearest_ffn(base: ModelConfig, match_arch: str) -> dict[str, int]:
    """Returns {d_ffn}: the FFN width whose parameter count of ``base`` comes nearest that of ``base`` as
    architecture ``match_arch`` (the narrower of two equally near)."""
    target = parameter_count(base.replace(**ARCHITECTURES[match_arch]))
    count = parameter_count(base)
    per_unit = parameter_count(base.replace(d_ffn=base.d_ffn + 1)) - count  # the count is linear in d_ffn
    low = max(1, base.d_ffn + (target - count) // per_unit)
    return {"d_ffn": min((low, low + 1), key=lambda f: abs(parameter_count(base.replace(d_ffn=f)) - target))}


def widened(base: ModelConfig, d_model: int) -> ModelConfig:
    """Returns ``base`` at hidden size ``d_model``, its FFN keeping ``base``'s d_ffn / d_model ratio."""
    return base.replace(d_model=d_model, d_ffn=round(d_model * base.d_ffn / base.d_model))


def paper_width_control() -> tuple[ModelConfig, ModelConfig]:
    """Returns the paper's width control at its shape (``PAPER_WIDTH_CONTROL``): its 125M Pre-LN baseline
    and that baseline widened 768 → 780 (``widened``)."""
    base = row_config(SCALES[PAPER_WIDTH_CONTROL["scale"]], RUNS["clm-prenorm"])
    return base, widened(base, PAPER_WIDTH_CONTROL["d_model"])


@functools.cache
def paper_widening() -> Fraction:
    """Returns the share of parameters the paper's width control added, counted as the module docstring
    says."""
    return excess(*paper_width_control())


def wider_hidden(base: ModelConfig, share: Fraction) -> dict[str, int]:
    """Returns {d_model, d_ffn}: the smallest hidden size above ``base``'s that its heads divide whose model
    (``widened``) has at least ``share`` more parameters than ``base``."""
    d_model = base.d_model - base.d_model % base.n_head + base.n_head
    while excess(base, widened(base, d_model)) < share:
        d_model += base.n_head
    cfg = widened(base, d_model)
    return {"d_model": cfg.d_model, "d_ffn": cfg.d_ffn}


def row_config(scale: Scale, spec: RunSpec) -> ModelConfig:
    """Returns the ModelConfig of ``spec``'s preset and row overrides at ``scale`` before any width rule:
    the objective's recipe, the scale's overrides and its vocabulary (rounded up to 64, as training
    rounds the tokenizer's)."""
    fields = {**scale.model, **spec.model, "vocab_size": -(-scale.vocab_size // 64) * 64}
    return preset(f"{spec.arch}-{scale.size}", objective=spec.objective, **fields)


def run_model(scale: Scale, key: str) -> dict[str, Any]:
    """Returns the ModelConfig overrides of run ``key``: the scale's, the row's, and the widths its width
    rule gives (the paper's wider hidden size, the FFN widened to a parameter count, GeGLU's matched FFN).
    What equal time compares: two runs with the same preset and these overrides are the same model."""
    spec = RUNS[key]
    model = {**scale.model, **spec.model}
    if spec.widen_hidden:
        model.update(wider_hidden(row_config(scale, spec), paper_widening()))
    if spec.widen_to_match:
        model.update(matched_ffn(row_config(scale, spec), spec.widen_to_match))
    if spec.ffn_matched_to:
        model.update(nearest_ffn(row_config(scale, spec), spec.ffn_matched_to))
    return model


def run_model_config(scale: Scale, key: str) -> ModelConfig:
    """Returns the ModelConfig run ``key`` trains at ``scale`` (at the scale's vocabulary)."""
    return row_config(scale, dataclasses.replace(RUNS[key], model=run_model(scale, key)))


def apply_setting(cfg: TrainConfig, key: str, scale: Scale) -> TrainConfig:
    """Returns ``cfg`` with run ``key``'s Table 5 setting applied (after any tuned LR, so an LR factor
    scales the LR the run would otherwise use)."""
    spec = RUNS[key]
    if not spec.setting:
        return cfg
    setting = dict(TABLE5_SETTINGS[spec.setting][1](scale))
    factor = setting.pop("lr_factor", None)
    if factor is not None:
        setting["lr"] = cfg.lr * factor
    return dataclasses.replace(cfg, **setting)
