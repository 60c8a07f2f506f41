"""The parts of a run's TrainConfig that depend on its scale: Table 4's width control and Table 5's
hyperparameter settings (``plan.RunSpec.widen_to_match`` and ``.setting``).

Width control (Table 4, "the baseline widened from 768 to 780", 127M at 125M): the smallest d_model
above the scale's that is divisible by n_head and gives a Pre-LN model at least as many parameters as
the architecture it matches at the scale's width; d_ffn keeps its ratio to d_model (3072 → 3120 at
125M, which is what makes the paper's 127M). At 125M this is 780, the paper's width.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...engine.config import ARCHITECTURES, SIZES, ModelConfig
from ...engine.train_config import TrainConfig
from .plan import RUNS, TABLE5_SETTINGS, Scale


def parameter_count(cfg: ModelConfig) -> int:
    """Returns the number of parameters of a model of ``cfg`` (built on the meta device: no memory)."""
    import torch

    from ...engine.model import Transformer

    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(cfg).parameters())


def matched_width(base: ModelConfig, match_arch: str) -> dict[str, int]:
    """Returns {d_model, d_ffn} of the widened ``base`` (see the module docstring)."""
    target = parameter_count(base.replace(**ARCHITECTURES[match_arch]))
    d = base.d_model + base.n_head
    while True:
        d_ffn = base.d_ffn * d // base.d_model
        if parameter_count(base.replace(d_model=d, d_ffn=d_ffn)) >= target:
            return {"d_model": d, "d_ffn": d_ffn}
        d += base.n_head


def scale_model_config(scale: Scale, arch: str, vocab_size: int) -> ModelConfig:
    """Returns the ModelConfig of ``arch`` at ``scale`` (its size, overrides and vocabulary)."""
    fields = {**SIZES[scale.size], **ARCHITECTURES[arch], **scale.model, "vocab_size": vocab_size}
    return ModelConfig(**fields)


def run_model(scale: Scale, key: str) -> dict[str, Any]:
    """Returns the ModelConfig overrides of run ``key``: the scale's, the row's, and the width control's
    d_model and d_ffn. What equal time compares: two runs with the same preset and these overrides are
    the same model."""
    spec = RUNS[key]
    model = {**scale.model, **spec.model}
    if spec.widen_to_match:
        base = scale_model_config(scale, spec.arch, -(-scale.vocab_size // 64) * 64)
        model.update(matched_width(base, spec.widen_to_match))
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
