"""``nfeval reproduce --tune``: ``nfeval tune`` per architecture before the experiments, so that every
comparison is between tuned runs, as in the paper (its Table 1 LRs were chosen per architecture).

One sweep per objective (the causal presets, the masked presets) over the scale's LR grid and short
budget, into ``<out>/tune/<objective>/``; resumable point by point as ``nfeval tune`` is. Cost: presets ×
LRs short runs per objective (tiny: 5 presets × 4 LRs × 300 steps, about 10 min on a quiet 2-core CPU).
"""

from __future__ import annotations

import os

from .plan import RUNS
from .runner import Context, log, preset_name, train_config

TUNED = {"clm": ("clm-prenorm", "clm-normformer", "clm-postnorm"), "mlm": ("mlm-prenorm", "mlm-normformer")}


def run_tune(ctx: Context) -> dict[str, str]:
    """Tunes the LR of every preset the experiments train; returns {objective: tune.json path}."""
    from ...tune.sweep import tune

    files = {}
    for objective, keys in TUNED.items():
        out = os.path.join(ctx.out, "tune", objective)
        presets = list(dict.fromkeys(preset_name(ctx, k) for k in keys))
        base = train_config(ctx, keys[0], seed=1)  # the scale's recipe; tune sets preset, lr and budget
        log(f"tuning {', '.join(presets)} ({objective}) over {ctx.scale.tune_lrs}, {ctx.scale.tune_budget}")
        tune(base, presets, list(ctx.scale.tune_lrs), ctx.scale.tune_budget, out, progress=ctx.progress)
        files[objective] = os.path.join(out, "tune.json")
    assert set(files) == {RUNS[k].objective for k in RUNS}
    return files
