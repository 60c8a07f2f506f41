"""What a run records about itself (``config.json``'s non-model blocks and each checkpoint's metadata)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..artifacts import hardware, provenance
from . import budget

if TYPE_CHECKING:
    from .trainer import Trainer


def meta(self: Trainer) -> dict[str, Any]:
    """Returns the trainer's config.json non-model blocks: resolved training config, data, provenance,
    compute.

    Written into ``config.json`` when a run starts and into every checkpoint."""
    train = {
        "config": dataclasses.asdict(self.cfg),
        "total_steps": self.total_steps,
        "warmup_steps": budget.warmup_steps(self.cfg, self.total_steps),
        "seq_len": self.seq_len,
        "global_batch": self.global_batch,
        "world_size": self.par.world,
        "parallel": self.par.name,
        "device": str(self.par.device),
        "budget": {**self.budget, "calibration": self.calibration},
        "flops_per_token": self.flops_per_token,
        "peak_flops": self.peak,
        "peak_flops_source": self.peak_source,
        "data": {
            "corpus": self.corpus_info,
            "tokens": self.tokens.describe(),
            "tokenizer_vocab": self.tok.get_vocab_size(),
        },
    }
    if self.grad_stats is not None:
        train["grad_stats"] = self.grad_stats.summary()
    compute = {
        "steps": self.step,
        "tokens": self.step * self.tokens_per_step,
        "flops": self.step * self.flops_per_step,
        "wall_s": self.wall_s,
        "device_hours": self.wall_s * self.par.world / 3600,
        "hardware": hardware(),
    }
    return {
        "train": train,
        "provenance": provenance(seed=self.cfg.seed, data_fingerprint=self.tokens.fingerprint),
        "compute": compute,
    }
