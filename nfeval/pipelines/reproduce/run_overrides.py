"""The parts of a run's TrainConfig that depend on its scale: Table 4's width control and Table 5's
hyperparameter settings (``plan.RunSpec.widen_to_match`` and ``.setting``).

Width control (Table 4: the baseline widened to NormFormer's parameter count): the Pre-LN model with
its FFN widened to the smallest d_ffn that gives it at least the parameters of the architecture it
matches, so the two differ by less than one FFN unit per layer (2·d_model + 1 parameters each), well within
1% at every size. Widening d_model instead moves in steps of n_head channels: at the tiny width (64 → 68) that
overshoots NormFormer's parameters by 10% and its step time by 14%.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...engine.model.config import ARCHITECTURES, SIZES, ModelConfig
from ...engine.training.train_config import TrainConfig
from .plan import RUNS, TABLE5_SETTINGS, Scale


def parameter_count(cfg: ModelConfig) -> int:
    """Returns the number of parameters of a model of ``cfg`` (built on the meta device: no memory)."""
    import torch

    from ...engine.model.model import Transformer

    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(cfg).parameters())


def matched_ffn(base: ModelConfig, match_arch: str) -> dict[str, int]:
    """Returns {d_ffn} of the widened ``base`` (see the module docstring)."""
    target = parameter_count(base.replace(**ARCHITECTURES[match_arch]))
    # one more FFN unit in every layer: a row of fc1 (with its bias) and a column of fc2
    per_unit = base.n_layer * (2 * base.d_model + 1)
    d_ffn = base.d_ffn + max(0, -(-(target - parameter_count(base)) // per_unit))
    while parameter_count(base.replace(d_ffn=d_ffn)) < target:  # the GeGLU FFN counts a unit twice
        d_ffn += 1
    return {"d_ffn": d_ffn}


def scale_model_config(scale: Scale, arch: str, vocab_size: int) -> ModelConfig:
    """Returns the ModelConfig of ``arch`` at ``scale`` (its size, overrides and vocabulary)."""
    fields = {**SIZES[scale.size], **ARCHITECTURES[arch], **scale.model, "vocab_size": vocab_size}
    return ModelConfig(**fields)


def run_model(scale: Scale, key: str) -> dict[str, Any]:
    """Returns the ModelConfig overrides of run ``key``: the scale's, the row's, and the width control's
    d_ffn. What equal time compares: two runs with the same preset and these overrides are
    the same model."""
    spec = RUNS[key]
    model = {**scale.model, **spec.model}
    if spec.widen_to_match:
        base = scale_model_config(scale, spec.arch, -(-scale.vocab_size // 64) * 64)
        model.update(matched_ffn(base, spec.widen_to_match))
    return model


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
